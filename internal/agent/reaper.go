package agent

import (
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/procstat"
)

// ReapOrphans collects zombies that were re-parented to us, the sandbox's
// PID 1; launchers run it in a goroutine (it never returns). Our own
// children are waited for by os/exec, which reaps them the moment they exit;
// a zombie that stays through two scans a few seconds apart is therefore an
// orphan nobody else will wait for. Reaping blindly with wait4(-1) would
// steal exit statuses from os/exec.
func ReapOrphans() {
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGCHLD)
	seen := map[int]bool{}
	// SIGCHLD drives it; the slow tick only catches what a coalesced signal
	// left behind, and keeps idle sandboxes nearly free.
	t := time.NewTicker(30 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-sigc:
			time.Sleep(500 * time.Millisecond)
		}
		now := map[int]bool{}
		for _, pid := range zombieChildren() {
			if seen[pid] {
				var ws syscall.WaitStatus
				_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
				continue
			}
			now[pid] = true
		}
		seen = now
	}
}

func zombieChildren() []int {
	self := os.Getpid()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := procstat.Read(pid); ok && st.State == 'Z' && st.PPid == self {
			out = append(out, pid)
		}
	}
	return out
}
