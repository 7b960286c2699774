//go:build !localonly

package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// serve --isolation gvisor creates every sandbox under gVisor.
func TestServeIsolation(t *testing.T) {
	requireGVisor(t)
	rt := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	url, key, done := startServe(t, ctx, rt, "--isolation", "gvisor")
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Error("serve did not stop")
		}
	}()
	id := createE2B(t, url, key)
	out, errs, code := cli(t, "", "exec", "--runtime-dir", rt, "--sandbox", id, "import os; print(os.uname().release)")
	if code != 0 || strings.TrimSpace(out) != "4.4.0" {
		t.Fatalf("a sandbox of serve --isolation gvisor: %d %q %q", code, out, errs)
	}
}
