// Package pidwait waits for a child process's exit on the Go runtime's
// poller (a pidfd), so that the wait parks a goroutine, not an OS thread.
//
// os/exec's Wait (and os.Process.Wait, and wait4) blocks a thread in the
// kernel for the child's whole life. A sandbox's supervisor waits for the
// sandbox's init for as long as the sandbox lives, and its agent for the
// Python kernel: two threads per idle sandbox doing nothing, and threads
// are not free on a host running a thousand sandboxes (each takes a pid and
// a kernel stack, and every sandbox's start calls pivot_root, which walks
// every thread on the host: issue 17's scale run).
package pidwait
