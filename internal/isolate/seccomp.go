//go:build linux

package isolate

import (
	"fmt"
	"runtime"
	"unsafe"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
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
//     recent Docker); socket(AF_PACKET) is denied.
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

func buildSeccompPolicy() (*seccomp.Policy, *arch.Info, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, nil, err
	}
	known := func(names []string) []string {
		var out []string
		for _, n := range names {
			if _, ok := info.SyscallNames[n]; ok {
				out = append(out, n)
			}
		}
		return out
	}
	var conditional []seccomp.NameWithConditions
	if _, ok := info.SyscallNames["clone"]; ok {
		// clone's flags are argument 0 on x86-64 and arm64.
		conditional = append(conditional, seccomp.NameWithConditions{Name: "clone",
			Conditions: []seccomp.Condition{{Argument: 0, Operation: seccomp.BitsSet, Value: nsCloneFlags}}})
	}
	// personality: only the values Docker allows (PER_LINUX, PER_LINUX32,
	// UNAME26 variants and the 0xffffffff query).
	var persona []seccomp.Condition
	for _, v := range []uint64{0x0, 0x8, 0x20000, 0x20008, 0xffffffff} {
		persona = append(persona, seccomp.Condition{Argument: 0, Operation: seccomp.NotEqual, Value: v})
	}
	conditional = append(conditional,
		seccomp.NameWithConditions{Name: "personality", Conditions: persona},
		seccomp.NameWithConditions{Name: "socket", Conditions: []seccomp.Condition{{Argument: 0, Operation: seccomp.Equal, Value: unix.AF_PACKET}}},
	)
	p := &seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{
			{Action: seccomp.ActionErrno, Names: known(deniedSyscalls), NamesWithCondtions: conditional},
			// The library returns EPERM for plain ActionErrno; any other
			// errno is encoded into the action's data bits.
			{Action: seccomp.ActionErrno | seccomp.Action(unix.ENOSYS), Names: known(enosysSyscalls)},
		},
	}
	return p, info, nil
}

// loadSeccomp installs the filter on the calling thread (stage 1 then execs,
// so the whole sandbox inherits it). no_new_privs must already be set.
func loadSeccomp() error {
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
	p, info, err := buildSeccompPolicy()
	if err != nil {
		return fmt.Errorf("seccomp policy: %w", err)
	}
	insts, err := p.Assemble()
	if err != nil {
		return fmt.Errorf("seccomp policy: %w", err)
	}
	// The library's own arch check lets a foreign arch fall through to the
	// default action (allow), which would let i386 syscalls bypass the
	// denylist; kill such callers first.
	prog := append([]bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4}, // seccomp_data.arch
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		bpf.RetConstant{Val: unix.SECCOMP_RET_KILL_PROCESS},
	}, insts...)
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return fmt.Errorf("seccomp assemble: %w", err)
	}
	filter := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		filter[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
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
