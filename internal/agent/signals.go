package agent

import (
	"os"
	"os/signal"
	"syscall"
)

// IgnoreSignals drains every catchable signal. User code runs as the agent's
// uid and may signal it (PID 1) with anything but SIGKILL/SIGSTOP, which the
// kernel keeps from a namespace's init. No signal may end the agent: its
// launcher ends a sandbox with SIGKILL from outside, and the agent's own
// lifetime ends it from within.
func IgnoreSignals() {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, append([]os.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGILL, syscall.SIGTRAP,
		syscall.SIGABRT, syscall.SIGBUS, syscall.SIGFPE, syscall.SIGSEGV, syscall.SIGTERM, syscall.SIGSYS,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE, syscall.SIGALRM, syscall.SIGVTALRM, syscall.SIGPROF,
		syscall.SIGXCPU, syscall.SIGXFSZ, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU}, osSignals...)...)
	go func() {
		for range sigs { //nolint:revive // drained on purpose: each signal is ignored
			continue
		}
	}()
}
