package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestMemoryReturn reads a sysfs tree laid out as the kernel's (free page
// reporting's module parameters, DAMON's admin directory) and checks the
// sentence the scale section prints; a machine with neither gives none.
func TestMemoryReturn(t *testing.T) {
	root := t.TempDir()
	write := func(rel, v string) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	oldPR, oldDamon := pageReportingDir, damonAdminDir
	t.Cleanup(func() { pageReportingDir, damonAdminDir = oldPR, oldDamon })
	pageReportingDir = filepath.Join(root, "pr")
	damonAdminDir = filepath.Join(root, "damon")

	if d := (memoryReturn{}).describe(snapMemoryReturn(), 1000); d != "" {
		t.Fatalf("a machine with neither: %q, want nothing", d)
	}

	write("pr/page_reporting_order", "9")
	write("pr/min_free_ms", "0")
	write("pr/reported_kib", "1048576")
	// One kdamond on (this process stands in for its thread: its CPU time
	// grows), one off (not listed).
	write("damon/0/state", "on")
	write("damon/0/pid", strconv.Itoa(os.Getpid()))
	write("damon/0/contexts/0/operations", "paddr")
	write("damon/0/contexts/0/schemes/0/action", "pageout")
	write("damon/1/state", "off")
	write("damon/1/pid", "1")

	write("pr/reported_kib", strconv.Itoa(1048576+2*(1<<20)))
	start := snapMemoryReturn()
	write("pr/reported_kib", strconv.Itoa(1048576+5*(1<<20)))
	for i := 0; i < 3e6; i++ { // some CPU for the stand-in kdamond
		_ = strconv.Itoa(i)
	}
	peak := snapMemoryReturn()

	if len(start.damon) != 1 || start.damon[0].pid != os.Getpid() {
		t.Fatalf("kdamonds %+v, want the one that is on", start.damon)
	}
	d := start.describe(peak, 1000)
	for _, want := range []string{
		"free blocks of " + strconv.Itoa(os.Getpagesize()<<9>>20) + " MiB and up",
		"once free for 0 ms",
		"3.0 GiB handed back while the sandboxes were created",
		"DAMON on (1 kdamond: ops paddr, actions pageout)",
		"% of one CPU",
	} {
		if !strings.Contains(d, want) {
			t.Errorf("%q lacks %q", d, want)
		}
	}
	if strings.Contains(d, "busy 0.0%") {
		t.Errorf("%q: the stand-in kdamond's CPU time was not counted", d)
	}
}
