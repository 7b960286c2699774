// Package cpupin keeps a sandbox's agent and its idle kernel on one CPU.
//
// An execution is a chain of wake-ups: the caller wakes the agent, the
// agent the kernel, the kernel the agent, the agent the caller. When the
// woken process last ran on another CPU that is now idle, the scheduler
// wakes it there: on a VM that is an inter-processor interrupt to a halted
// vCPU, an exit to the hypervisor on both sides. With the agent and the
// waiting kernel on the same CPU, the agent's wake of the kernel and the
// kernel's of the agent stay on that CPU. On a 2-vCPU VM, x + 2 took
// 0.130-0.157 ms p50 against 0.143-0.190 without (four interleaved runs,
// bench -ab -ab-rtt); pinning only one of the two gained nothing.
//
// Only what waits is pinned. The agent (a Go process on one P) runs on its
// CPU for good, but every process it starts starts with the agent's full
// set (Start): user commands, kernels and their children are never
// narrowed. The kernel pins only its main thread, only while it waits for
// the next command, and gives user code back the set it had at the end of
// the previous cell (internal/kernel/py/commands.py).
package cpupin

import (
	"hash/fnv"
	"os/exec"
	"sync/atomic"
)

// pinned is the CPU this process is pinned to, -1 while it isn't.
var pinned atomic.Int64

func init() { pinned.Store(-1) }

// CPU is the CPU this process is pinned to, or -1.
func CPU() int { return int(pinned.Load()) }

// pick chooses one of allowed (sorted) for key: spread over the set, so
// that many sandboxes' agents don't share one CPU.
func pick(allowed []int, key string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return allowed[h.Sum32()%uint32(len(allowed))]
}

// Start is cmd.Start, the child starting with the CPUs this process had
// before Pin (all of them, not the one it is pinned to).
func Start(cmd *exec.Cmd) error {
	return Unpinned(cmd.Start)
}
