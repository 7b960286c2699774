// Command code-sandboxes-agent is the in-sandbox agent as a standalone static
// binary, for launchers that start it themselves (containers, pods, tests):
// it serves E2B's envd and code-interpreter protocols on one listener.
//
//	code-sandboxes-agent --listen unix:/run/agent.sock --token-file /run/token
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/code-sandboxes/code-sandboxes/internal/agent"
)

func main() {
	listen := flag.String("listen", "tcp:127.0.0.1:49983", "where to listen: unix:PATH or tcp:HOST:PORT")
	tokenFile := flag.String("token-file", "", "file holding the access token (X-Access-Token); empty = $CODE_SANDBOXES_TOKEN, else no token")
	workdir := flag.String("workdir", "", "default working directory (default $HOME or /home/user)")
	python := flag.String("python", "", "python interpreter for kernels (default python3 from PATH)")
	lifetime := flag.Duration("lifetime", 0, "exit after this long (0 = never); POST /x/timeout restarts the countdown")
	id := flag.String("id", "", "sandbox id reported by /x/info")
	flag.Parse()
	agent.SingleThreaded()

	token := os.Getenv("CODE_SANDBOXES_TOKEN")
	os.Unsetenv("CODE_SANDBOXES_TOKEN")
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			fatal(err)
		}
		token = strings.TrimSpace(string(b))
	}
	if *workdir == "" {
		*workdir = os.Getenv("HOME")
		if *workdir == "" {
			*workdir = "/home/user"
		}
	}
	network, addr, ok := strings.Cut(*listen, ":")
	if !ok || (network != "unix" && network != "tcp") {
		fatal(fmt.Errorf("--listen %q: use unix:PATH or tcp:HOST:PORT", *listen))
	}
	if network == "unix" {
		_ = os.Remove(addr)
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		fatal(err)
	}
	if network == "unix" {
		_ = os.Chmod(addr, 0o600)
	}
	routes, closeEnvd := agent.EnvdRoutes(agent.EnvdOptions{Workdir: *workdir, Home: os.Getenv("HOME")})
	srv := agent.New(agent.Config{
		ID: *id, AccessToken: token, Python: *python, Workdir: *workdir, Lifetime: *lifetime,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Routes: routes, OnClose: closeEnvd,
	})
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	fmt.Fprintf(os.Stderr, "code-sandboxes-agent %s listening on %s\n", agent.Version, *listen)
	if err := srv.Serve(ctx, ln); err != nil {
		fatal(err)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "code-sandboxes-agent:", err)
	os.Exit(1)
}
