//go:build linux

package sandboxes_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/cpupin"
)

// cpuList parses a Cpus_allowed_list ("0-3,6").
func cpuList(list string) []int {
	var out []int
	for _, part := range strings.Split(strings.TrimSpace(list), ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return nil
			}
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	return out
}

// The agent and its kernel wait on one CPU between cells (internal/cpupin),
// and nothing the user runs is narrowed by it: a cell, a thread it starts,
// a command all get the sandbox's whole set, and a set the user chose for
// the kernel's thread in one cell is still theirs in the next.
func TestLocalCPUPinOnlyWhileWaiting(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	whole, err := cpupin.Allowed()
	if err != nil {
		t.Fatal(err)
	}
	sb := newLocal(t, nil)
	ex := runOut(t, sb, `import os, threading, json
seen = {}
t = threading.Thread(target=lambda: seen.update(thread=sorted(os.sched_getaffinity(0))))
t.start(); t.join()
print(json.dumps({"cell": sorted(os.sched_getaffinity(0)), "thread": seen["thread"], "pid": os.getpid()}))`)
	var got struct {
		Cell, Thread []int
		Pid          int
	}
	if ex.Error != nil || json.Unmarshal([]byte(ex.Stdout()), &got) != nil {
		t.Fatalf("cell: %q %v", ex.Stdout(), ex.Error)
	}
	if !slices.Equal(got.Cell, whole) || !slices.Equal(got.Thread, whole) {
		t.Fatalf("user code may run on %v (its thread on %v); the sandbox's set is %v", got.Cell, got.Thread, whole)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// From a command, while the kernel waits for its next cell.
	res, err := sb.Commands().Run(ctx, fmt.Sprintf("grep Cpus_allowed_list /proc/self/status /proc/%d/status", got.Pid))
	if err != nil {
		t.Fatal(err)
	}
	var self, kernel []int
	for _, l := range strings.Split(res.Stdout, "\n") {
		file, v, ok := strings.Cut(l, ":Cpus_allowed_list:")
		switch {
		case !ok:
		case file == "/proc/self/status":
			self = cpuList(v)
		default:
			kernel = cpuList(v)
		}
	}
	if !slices.Equal(self, whole) {
		t.Fatalf("a command may run on %v, not the sandbox's %v (%q)", self, whole, res.Stdout)
	}
	if len(whole) < 2 {
		t.Logf("one CPU: nothing is pinned (kernel waits on %v)", kernel)
	} else if len(kernel) != 1 {
		t.Fatalf("the waiting kernel may run on %v; it should wait on the agent's one CPU (%q)", kernel, res.Stdout)
	}
	// The user's own choice for the kernel's thread outlives the wait.
	mine := whole[len(whole)-1]
	if ex := runOut(t, sb, fmt.Sprintf("import os; os.sched_setaffinity(0, {%d})", mine)); ex.Error != nil {
		t.Fatal(ex.Error)
	}
	if ex := runOut(t, sb, "print(sorted(os.sched_getaffinity(0)))"); strings.TrimSpace(ex.Stdout()) != fmt.Sprintf("[%d]", mine) {
		t.Fatalf("the set the user chose in the last cell: %q, want [%d]", ex.Stdout(), mine)
	}
}
