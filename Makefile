# code-sandboxes — see README.md.
GO      ?= go
BIN     := bin/code-sandboxes
LDFLAGS := -s -w -X main.version=$(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
export CGO_ENABLED := 0
# The console's browser test saves a screenshot of each page here: CI's
# artifact, looked at, not only asserted.
export CONSOLE_SCREENSHOTS ?= $(CURDIR)/artifacts/console

.PHONY: all build deps test test-short fuzz vet lint bench run generate clean

all: build

# The lean code-sandboxes-sandbox goes beside the CLI, which runs its
# sandboxes' processes from it, and code-sandboxes-init beside that, which
# runs their first stage (README: "The sandbox binary").
build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/code-sandboxes
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)-sandbox ./cmd/code-sandboxes-sandbox
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)-init ./cmd/code-sandboxes-init

deps:
	./scripts/install-deps.sh

# The README's test command. The docker variant's tests need a Docker
# engine: with-dockerd.sh starts dockerd for the run when none answers. The
# kubernetes variant's need a cluster: with-k8s.sh builds Kubernetes from
# the Go module proxy (once per machine, cached), brings a single node up
# for the run and tears it down, leaving nothing behind.
# go test replays every fuzz target's seeds, each finding so far among them
# (testdata/fuzz). Mutation is `make fuzz` (scripts/fuzz.sh, FUZZTIME per
# target; SECURITY.md lists them), not part of make test: three runs of
# 5 s a target found three new inputs, and a test run whose outcome is
# random can't gate what lands. Set FUZZ=1 to add it to make test.
test: deps lint
	./scripts/with-dockerd.sh ./scripts/with-k8s.sh $(GO) test -count=1 -timeout 50m ./...
	if [ "$${FUZZ:-}" = 1 ]; then FUZZTIME=$${FUZZTIME:-5s} ./scripts/fuzz.sh; fi

fuzz:
	./scripts/fuzz.sh

test-short: vet
	$(GO) test -short -count=1 ./...

# The root package (and so the e2b and docker variants) must keep building
# for macOS: local sandboxes and environment builds need Linux and refuse
# there (files *_linux.go / *_other.go), and the test files that need Linux
# are //go:build linux. The darwin vet type-checks everything else,
# tests included, without running anything.
vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	GOOS=darwin GOARCH=arm64 $(GO) build ./...
	GOOS=darwin GOARCH=arm64 $(GO) vet ./...

# staticcheck, pinned, on every make test (it found a lost error in the
# snapshot key's creation).
lint: vet
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

# The README's main job: a sandbox on the embedded default local variant.
# It installs only what running needs (python3), not the test tools, and
# builds the CLI with the local variant only and without serve, interpret
# and mcp (-tags localonly: 391 packages instead of 853, none of
# client-go), so a first run is quick.
run:
	./scripts/install-deps.sh run
	$(GO) run -tags localonly ./cmd/code-sandboxes exec 'import sys; print(sys.version)'

bench: deps build
	./bench/run.sh

generate:
	./tools/generate.sh

clean:
	rm -rf bin
