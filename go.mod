module github.com/code-sandboxes/code-sandboxes

go 1.26.8

require (
	connectrpc.com/connect v1.21.1
	github.com/elastic/go-seccomp-bpf v1.6.0
	github.com/spf13/cobra v1.10.2
	golang.org/x/net v0.41.0
	golang.org/x/sys v0.50.0
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
)
