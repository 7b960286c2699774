package envd

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	fspb "github.com/code-sandboxes/code-sandboxes/internal/envdpb/filesystem"
)

// TestWatchReportsNewTreeContents: a recursive watch reports what a new
// directory already holds when its watch is added. `mkdir -p a/b/c` makes
// b before the watcher can watch a, so b (and c, and a file in b) had no
// event of their own: TestRootPolledWatcher saw only "sub" for
// `makeDir sub/deeper` on a busy host.
func TestWatchReportsNewTreeContents(t *testing.T) {
	root := t.TempDir()
	for round := range 20 {
		w, err := newDirWatcher(root, true, false, 1024, true)
		if err != nil {
			t.Fatal(err)
		}
		top := filepath.Join(root, "r"+string(rune('a'+round)))
		if err := os.MkdirAll(filepath.Join(top, "b", "c"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(top, "b", "f"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		base := filepath.Base(top)
		want := []string{base, base + "/b", base + "/b/c", base + "/b/f"}
		var seen []string
		deadline := time.After(5 * time.Second)
	collect:
		for {
			missing := false
			for _, n := range want {
				if !slices.Contains(seen, n) {
					missing = true
				}
			}
			if !missing {
				break
			}
			select {
			case ev := <-w.events:
				if ev.GetType() == fspb.EventType_EVENT_TYPE_CREATE {
					seen = append(seen, ev.GetName())
				}
			case <-deadline:
				break collect
			}
		}
		w.close()
		for _, n := range want {
			if !slices.Contains(seen, n) {
				t.Fatalf("round %d: no create event for %s (saw %q)", round, n, seen)
			}
		}
	}
}
