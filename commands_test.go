package sandboxes_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
)

// Run honours its context: a deadline ends the wait and kills the command;
// CommandTimeout's expiry is an ErrTimeout, never a clean exit 0; commands
// get the contract's LANG and TZ.
func TestCommandsContextTimeoutEnv(t *testing.T) {
	ctx := context.Background()
	sb, err := sandboxes.Create(ctx, localConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()

	dctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	start := time.Now()
	res, err := sb.Commands().Run(dctx, "sleep 5; echo done")
	t.Logf("ctx deadline: res=%+v err=%v after %v", res, err, time.Since(start))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Run past its context's deadline: err = %v, want context.DeadlineExceeded", err)
	}
	// The kill and the end of the process table entry are asynchronous:
	// gone within a few seconds (well before the command's own 5 s).
	noSleeper := func(what string) {
		t.Helper()
		var left []sandboxes.ProcessInfo
		for range 40 {
			ps, err := sb.Commands().List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			left = left[:0]
			for _, p := range ps {
				if strings.Contains(strings.Join(p.Args, " "), "sleep 5") {
					left = append(left, p)
				}
			}
			if len(left) == 0 {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Errorf("the command outlived its %s: %+v", what, left)
	}
	noSleeper("context")

	res, err = sb.Commands().Run(ctx, "sleep 5; echo done", sandboxes.CommandTimeout(time.Second))
	t.Logf("CommandTimeout: res=%+v err=%v", res, err)
	if !errors.Is(err, sandboxes.ErrTimeout) {
		t.Errorf("CommandTimeout expiry: err = %v, want ErrTimeout", err)
	}
	if res != nil && res.ExitCode == 0 {
		t.Errorf("CommandTimeout expiry reported exit code 0: %+v", res)
	}
	noSleeper("CommandTimeout")

	res, err = sb.Commands().Run(ctx, `printf '%s|%s' "$LANG" "$TZ"`)
	if err != nil {
		t.Fatal(err)
	}
	if res.Stdout != "C.UTF-8|UTC" {
		t.Errorf("commands' LANG|TZ = %q, want the contract's C.UTF-8|UTC", res.Stdout)
	}
}
