//go:build linux

package isolate

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The seccomp filter is a DENYLIST derived from Docker's default profile
// (moby profiles/seccomp/default.json). Docker's profile is an allowlist:
// everything not listed gets EPERM, and some calls are allowed only with a
// capability (CAP_SYS_ADMIN, ...). We have no capabilities at all, so we list
// what Docker leaves out for a capability-less container and allow the rest.
// Differences from Docker:
//   - denylist: a syscall newer than this list is allowed (Docker denies
//     unknown ones). The kernel's own permission checks still apply and the
//     sandbox holds no capabilities, so new privileged calls fail anyway.
//   - stricter: ptrace, process_vm_readv/writev, kcmp and pidfd_getfd are
//     denied (Docker allows them on kernels >= 4.8); adjtimex and
//     clock_adjtime are denied even read-only; io_uring is denied (as in
//     recent Docker).
//   - socket families are an allow-list (argRules below): unix, inet, inet6
//     and netlink route/sock_diag; vsock (which ignores network namespaces:
//     a route to the hypervisor), packet, alg, bluetooth... get EAFNOSUPPORT.
//   - the agent (PID 1) runs as the same uid as user code, so the calls
//     that act on another process by pid on the strength of a uid match
//     alone (prlimit, setpriority, ioprio_set, sched_set*) are limited to
//     the calling process (argRules below).
//   - clone3 fails with ENOSYS like in Docker (its flags are in memory the
//     filter cannot inspect; ENOSYS makes glibc fall back to clone, whose
//     namespace flags we do check).
//   - syscalls of a foreign ABI (i386 via int 0x80 on x86-64) kill the process
//     instead of being filtered with a second table.
var deniedSyscalls = []string{
	// Mounts and the new mount API.
	"mount", "umount", "umount2", "pivot_root", "chroot",
	"fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "open_tree_attr", "mount_setattr",
	// Namespaces.
	"unshare", "setns",
	// Debugging / other processes' memory.
	"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
	// Kernel, modules, system state.
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"create_module", "get_kernel_syms", "query_module",
	"reboot", "swapon", "swapoff", "acct", "syslog", "bpf", "perf_event_open",
	"quotactl", "quotactl_fd", "lookup_dcookie", "nfsservctl", "uselib", "ustat", "sysfs", "_sysctl",
	"vhangup", "iopl", "ioperm", "modify_ldt", "vm86", "vm86old",
	// Keyring (not namespaced).
	"keyctl", "add_key", "request_key",
	// Clock.
	"clock_settime", "clock_settime64", "settimeofday", "stime", "adjtimex", "clock_adjtime", "clock_adjtime64",
	// File handles bypass path permission checks.
	"open_by_handle_at", "name_to_handle_at",
	// Memory tricks used in kernel exploits.
	"userfaultfd",
	"fanotify_init",
}

// ENOSYS rather than EPERM: callers probe these and fall back.
var enosysSyscalls = []string{"clone3", "io_uring_setup", "io_uring_enter", "io_uring_register"}

const nsCloneFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWUSER |
	unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP | unix.CLONE_NEWTIME

// seccompRuleSet is seccompasm.Rules, which this file can't name: on amd64
// the library behind it is linked only into the tests.
type seccompRuleSet struct {
	Denied       []string
	ENOSYS       []string
	NSCloneFlags uint64
	Personas     []uint64
	Args         []bpf.Instruction
}

// seccompRules are the filter's rules, for seccompasm.Assemble: at run time
// on architectures without a pre-assembled filter (seccomp_asm.go), and in
// the test that writes and checks the amd64 one (zseccomp_amd64.go).
func seccompRules() seccompRuleSet {
	r := seccompRuleSet{
		Denied:       deniedSyscalls,
		ENOSYS:       enosysSyscalls,
		NSCloneFlags: nsCloneFlags,
		// personality: only the values Docker allows (PER_LINUX,
		// PER_LINUX32, UNAME26 variants and the 0xffffffff query).
		Personas: []uint64{0x0, 0x8, 0x20000, 0x20008, 0xffffffff},
	}
	for _, a := range argRules() {
		r.Args = append(r.Args, a.assemble()...)
	}
	return r
}

// loadSeccomp installs the filter on the calling thread (stage 1 then
// execs, so the whole sandbox inherits it) or, allThreads, on every thread
// of the process (TSYNC: hardened in place). no_new_privs must already be
// set (on every thread).
func loadSeccomp(allThreads bool) error {
	if allThreads {
		return installSeccomp(unix.SECCOMP_FILTER_FLAG_TSYNC)
	}
	return installSeccomp(0)
}

// LoadSeccompAllThreads installs the sandbox's seccomp filter (the one every
// local sandbox runs under) on every thread of the calling process, and
// sets no_new_privs, which the filter needs. It is for a process that is
// already inside some other sandbox and can't re-exec under the filter the
// way stage 1 does: the docker variant's agent (PID 1 of its container)
// calls it after dropping to the sandbox user, so that a container runs
// under this filter stacked on the engine's own, whatever the engine
// version allows (Docker before 25 allows io_uring, and i386 syscalls on
// x86-64). Filters only add up: the engine's stays in force.
func LoadSeccompAllThreads() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// TSYNC gives the other threads no_new_privs along with the filter.
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	return installSeccomp(unix.SECCOMP_FILTER_FLAG_TSYNC)
}

func installSeccomp(flags uintptr) error {
	filter, err := seccompFilter()
	if err != nil {
		return fmt.Errorf("seccomp policy: %w", err)
	}
	fprog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	// With TSYNC a positive result is the id of a thread that could not be
	// synchronised (the filter was then installed nowhere).
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&fprog)))
	if errno != 0 {
		return fmt.Errorf("seccomp: %w", errno)
	}
	if r != 0 {
		return fmt.Errorf("seccomp: thread %d could not take the filter", r)
	}
	return nil
}

// The rules below test int arguments on their low 32 bits only: the kernel
// truncates an int argument, so a 64-bit comparison (what the policy
// library does) would be bypassed by garbage in the upper half.

// argRule refuses a syscall with errno when its checks say so: body is BPF
// that either returns (refusing) or falls through to what follows.
type argRule struct {
	nr   uint32
	body func(refuse bpf.Instruction) []bpf.Instruction
}

// argRules are the checks on arguments (see the header comment).
//
// Socket families: an allow-list, EAFNOSUPPORT for the rest (programs
// probing a family fall back). Netlink only for route (getifaddrs, ip) and
// sock_diag (ss).
//
// Other processes: the agent is PID 1 and has threads with tids of their
// own, so "not PID 1" would not protect it: these calls may name only the
// caller (pid 0); reading another process's limits (prlimit64 without a
// new limit) stays allowed. Setting priorities by process group or by user
// (which includes the agent) is refused. sched_setaffinity stays allowed:
// the cgroup's CPU quota bounds what pinning the agent could do, and
// thread-pinning libraries (OpenMP) name their threads' tids.
func argRules() []argRule {
	const ioprioWhoProcess = 1
	selfOnly := func(refuse bpf.Instruction) []bpf.Instruction {
		return []bpf.Instruction{loadArg(0), bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0, SkipTrue: 1}, refuse}
	}
	return []argRule{
		{unix.SYS_SOCKET, func(refuse bpf.Instruction) []bpf.Instruction {
			return []bpf.Instruction{
				loadArg(0),
				bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.AF_UNIX, SkipTrue: 7},
				bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.AF_INET, SkipTrue: 6},
				bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.AF_INET6, SkipTrue: 5},
				bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.AF_NETLINK, SkipFalse: 3},
				loadArg(2), // the netlink protocol
				bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.NETLINK_ROUTE, SkipTrue: 2},
				bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.NETLINK_SOCK_DIAG, SkipTrue: 1},
				refuse,
			}
		}},
		{unix.SYS_SOCKETPAIR, func(refuse bpf.Instruction) []bpf.Instruction {
			return []bpf.Instruction{loadArg(0), bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.AF_UNIX, SkipTrue: 1}, refuse}
		}},
		{unix.SYS_SETPRIORITY, func(refuse bpf.Instruction) []bpf.Instruction {
			return []bpf.Instruction{
				loadArg(0), bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.PRIO_PROCESS, SkipTrue: 1}, refuse,
				loadArg(1), bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0, SkipTrue: 1}, refuse,
			}
		}},
		{unix.SYS_IOPRIO_SET, func(refuse bpf.Instruction) []bpf.Instruction {
			return []bpf.Instruction{
				loadArg(0), bpf.JumpIf{Cond: bpf.JumpEqual, Val: ioprioWhoProcess, SkipTrue: 1}, refuse,
				loadArg(1), bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0, SkipTrue: 1}, refuse,
			}
		}},
		{unix.SYS_SCHED_SETSCHEDULER, selfOnly},
		{unix.SYS_SCHED_SETPARAM, selfOnly},
		{unix.SYS_SCHED_SETATTR, selfOnly},
		{unix.SYS_PRLIMIT64, func(refuse bpf.Instruction) []bpf.Instruction {
			// Refused when pid != 0 and new (a pointer: both halves) != 0.
			return []bpf.Instruction{
				loadArg(0),
				bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0, SkipTrue: 5},
				bpf.LoadAbsolute{Off: 16 + 8*2, Size: 4},
				bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: 0, SkipTrue: 2},
				bpf.LoadAbsolute{Off: 16 + 8*2 + 4, Size: 4},
				bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0, SkipTrue: 1},
				refuse,
			}
		}},
	}
}

// loadArg loads the low 32 bits of argument i (seccomp_data.args[i]).
func loadArg(i int) bpf.Instruction {
	off := uint32(16 + 8*i)
	if bigEndian {
		off += 4
	}
	return bpf.LoadAbsolute{Off: off, Size: 4}
}

var bigEndian = binary.NativeEndian.Uint16([]byte{0, 1}) == 1

// assemble renders the rule: a test of the syscall number, then the body,
// which falls through to what follows unless it refuses.
func (r argRule) assemble() []bpf.Instruction {
	errno := unix.Errno(unix.EPERM)
	if r.nr == unix.SYS_SOCKET || r.nr == unix.SYS_SOCKETPAIR {
		errno = unix.EAFNOSUPPORT
	}
	body := r.body(bpf.RetConstant{Val: unix.SECCOMP_RET_ERRNO | uint32(errno)})
	return append([]bpf.Instruction{
		bpf.LoadAbsolute{Off: 0, Size: 4}, // seccomp_data.nr
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: r.nr, SkipTrue: uint8(len(body))},
	}, body...)
}
