package hostile_test

import (
	"flag"
	"os"
	"testing"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/e2b"
	"github.com/code-sandboxes/code-sandboxes/hostile"
	"github.com/code-sandboxes/code-sandboxes/internal/e2bserver"
	"github.com/code-sandboxes/code-sandboxes/local"
)

var full = flag.Bool("hostile.full", false, "run every hostile case through serve too (default: the escape cases only)")

// TestHostileThroughServe runs the suite on the e2b variant against our own
// serve (in-process, loopback): the same attacks through E2B's protocols.
// By default the resource cases, already proven on local and identical
// behind serve, are skipped to keep make test short; -hostile.full runs them.
func TestHostileThroughServe(t *testing.T) {
	requireLocal(t)
	srt, err := os.MkdirTemp("", "cs-hostile-e2b-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(srt)
	s, err := e2bserver.New(e2bserver.Options{APIKeys: []string{testKey}, Config: sandboxes.Config{Options: local.Options{RuntimeDir: srt}}})
	if err != nil {
		t.Fatal(err)
	}
	base, stop, err := s.StartLoopback(false)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("HANG: server shutdown: %v", err)
		}
		waitGoneDir(t, srt)
	}()
	cfg := sandboxes.Config{Variant: "e2b", Options: e2b.Options{APIKey: testKey, APIURL: base, SandboxURL: base}}
	o := hostile.Options{
		SameHost: true,
		Created:  func(t *testing.T, sb *sandboxes.Sandbox) { readRec(t, srt, sb.ID()) },
		Secrets:  func(t *testing.T, sb *sandboxes.Sandbox) []string { return []string{readRec(t, srt, sb.ID()).Token} },
		Gone:     func(t *testing.T, id string) { waitGone(t, srt, id) },
		Skip:     map[string]string{},
	}
	if !*full {
		for _, c := range []string{"SetuidBinaries", "FloodDisplay", "FileDescriptors", "DiskFill", "SignalAgent", "NeverEnds", "ReadHostFiles"} {
			o.Skip[c] = "proven on local; run with -hostile.full to repeat through serve"
		}
	}
	hostile.Run(t, cfg, o)
}
