// Command code-sandboxes runs untrusted code in isolated sandboxes: exec, repl,
// create, list, get, delete, environments and version.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/code-sandboxes/code-sandboxes/internal/settings"
	"github.com/code-sandboxes/code-sandboxes/local"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	// make build puts the lean code-sandboxes-sandbox beside this binary:
	// sandboxes' processes run from it rather than from this binary, which
	// links every variant (its package inits cost each of them start time
	// and memory).
	local.UseSandboxBinaryBeside()
	settings.WarnUnknown("code-sandboxes")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Sandbox output (and errors quoting it) reaches a terminal escaped.
	stdout, stderr := terminalSafe(os.Stdout), terminalSafe(os.Stderr)
	root := newRoot()
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return
	}
	var ee exitError
	if errors.As(err, &ee) {
		os.Exit(ee.code)
	}
	fmt.Fprintln(stderr, "error:", err)
	os.Exit(1)
}

// exitError carries an exit status without printing anything more.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }
