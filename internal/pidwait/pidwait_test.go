//go:build linux

package pidwait

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// TestExitedLeavesTheStatus: Exited returns once the child has exited and
// leaves it unreaped, so Wait still reports how it ended.
func TestExitedLeavesTheStatus(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 0.2; exit 7")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if !Exited(cmd.Process.Pid) {
		t.Fatal("Exited: false (no pidfd?) on Linux")
	}
	err := cmd.Wait()
	if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 7 {
		t.Fatalf("Wait after Exited: %v, exit code %v; want 7", err, cmd.ProcessState)
	}
}

// TestExitedHoldsNoThread: waiting for many children at once parks
// goroutines, not threads blocked in waitid.
func TestExitedHoldsNoThread(t *testing.T) {
	const n = 32
	var cmds []*exec.Cmd
	for range n {
		cmd := exec.Command("sleep", "30")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	var wg sync.WaitGroup
	for _, c := range cmds {
		wg.Go(func() {
			if Exited(c.Process.Pid) {
				_ = c.Wait()
			}
		})
	}
	defer func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
		}
		wg.Wait()
	}()
	// Give every goroutine time to reach its wait (a thread blocked in
	// waitid would show now); no deadline to meet, only a state to see.
	for range 50 {
		if w := threadsInWait(t); w >= n/2 {
			t.Fatalf("%d threads blocked in wait4/waitid for %d children", w, n)
		}
		unix.Nanosleep(&unix.Timespec{Nsec: 10e6}, nil)
	}
}

func threadsInWait(t *testing.T) int {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/syscall")
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) > 0 && (f[0] == strconv.Itoa(unix.SYS_WAIT4) || f[0] == strconv.Itoa(unix.SYS_WAITID)) {
			n++
		}
	}
	return n
}
