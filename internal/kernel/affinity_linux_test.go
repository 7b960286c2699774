package kernel

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/code-sandboxes/code-sandboxes/internal/cpupin"
)

// A kernel started on fewer CPUs than its agent's (an early kernel, moved
// off the CPU its agent pins itself to: cpupin.Away) takes the whole set
// back from its hello before any user code runs, on every thread: one a
// site hook started before the hello was narrowed too.
func TestKernelTakesWholeCPUSetBack(t *testing.T) {
	whole, err := cpupin.Allowed()
	if err != nil {
		t.Fatal(err)
	}
	if len(whole) < 2 {
		t.Skip("one CPU: nothing is narrowed")
	}
	dir := t.TempDir()
	hook := fmt.Sprintf("import os, threading, time\nos.sched_setaffinity(0, {%d})\nthreading.Thread(target=time.sleep, args=(3600,), daemon=True).start()\n", whole[0])
	if err := os.WriteFile(filepath.Join(dir, "sitecustomize.py"), []byte(hook), 0o644); err != nil {
		t.Fatal(err)
	}
	s := newTestSession(t, func(o *Options) { o.Env = append(os.Environ(), "PYTHONPATH="+dir) })
	r := exec1(t, s, `import os, json
print(json.dumps({t: sorted(os.sched_getaffinity(int(t))) for t in os.listdir("/proc/self/task")}))`)
	var sets map[string][]int
	if err := json.Unmarshal([]byte(r.stdout()), &sets); err != nil {
		t.Fatalf("%v: %q %q", err, r.stdout(), r.stderr())
	}
	if len(sets) < 2 {
		t.Fatalf("the site hook's thread is missing: %v", sets)
	}
	for tid, cpus := range sets {
		if !slices.Equal(cpus, whole) {
			t.Errorf("thread %s may run on %v, not the whole %v", tid, cpus, whole)
		}
	}
}
