package isolate

// Types and constants shared by all platforms; the implementation is
// Linux-only (isolate.go), other platforms get stubs (other.go).

import (
	"fmt"
	"io"
	"os"
	"syscall"
)

// In-sandbox identity (DESIGN.md §4).
const (
	SandboxUID = 1000
	SandboxGID = 100
)

// When the caller is root the sandbox user is mapped to these host ids. They
// follow the rootless convention "host = 100000 + container id" (the start of
// the usual /etc/subuid range), so they are never host root and never a real
// login user, and files they leave behind are recognisable. The id is fixed
// rather than per-sandbox: sandboxes already cannot see each other (separate
// pid/mount namespaces, no shared writable directory), and a fixed id keeps
// host-side ownership predictable.
const (
	RootModeHostUID = 100000 + SandboxUID
	RootModeHostGID = 100000 + SandboxGID
)

// Paths of the root broker inside a sandbox with a root user.
const (
	// RootDir is root-owned, on the root directory's tmpfs; a rootfs's own
	// entry of that name is hidden.
	RootDir    = "/.code-sandboxes"
	RootSocket = RootDir + "/root.sock"
	// rootBrokerPidFile holds the broker's pid (in the sandbox's pid
	// namespace) while ChildAsync holds it: a root request finding no
	// socket releases it (SIGCONT) instead of waiting for its holder.
	rootBrokerPidFile = RootDir + "/broker.pid"
	// SudoPath is this binary, read-only: run as "sudo" it is the client.
	SudoPath = RootDir + "/bin/sudo"
	// RootHome is root's home; a rootfs's own /root is hidden.
	RootHome = "/root"
)

// RootOuterUID and RootOuterGID are the sandbox root's ids in the sandbox's
// own user namespace, where the agent runs: what it sees as the owner of
// root's files and processes.
const (
	RootOuterUID = 999
	RootOuterGID = 999
)

// Defaults for the size-limited tmpfs mounts.
const (
	DefaultHomeSize  = 1 << 30   // /home/user
	DefaultFilesSize = 1 << 30   // /files
	DefaultTmpSize   = 512 << 20 // /tmp
	// DefaultRootSize bounds what user code writes to the root directory
	// itself (mkdir /x, /0/file): the sandbox's root is a tmpfs of its own
	// holding the read-only system directories' mount points.
	DefaultRootSize = 512 << 20
	// DefaultNoFile is RLIMIT_NOFILE (soft and hard) inside the sandbox.
	DefaultNoFile = 4096
)

// A tmpfs's size bounds its data, not its inodes: empty files cost kernel
// memory only (200,000 of them in a 64 KiB /dev took 183 MiB). Every tmpfs
// gets an inode count too: one per 8 KiB of size (a tree of small files,
// such as a pip install, stays well inside; /home/user's 1 GiB allows
// 131072), at least 1024; /dev, which holds about twenty entries, 512.
const (
	tmpfsBytesPerInode = 8 << 10
	minTmpfsInodes     = 1024
	DevInodes          = 512
)

// TmpfsSize is the size of a RAM-backed tmpfs whose default is def in a
// sandbox with memory limit memory (0 = none): at most half the limit, so
// that filling one mount ends with ENOSPC, not with the OOM killer.
func TmpfsSize(def, memory int64) int64 {
	if memory > 0 {
		return min(def, max(memory/2, 1<<20))
	}
	return def
}

// TmpfsInodes is the nr_inodes option of a tmpfs of size bytes.
func TmpfsInodes(size int64) int64 {
	return max(size/tmpfsBytesPerInode, minTmpfsInodes)
}

// Network modes.
const (
	NetworkNone = "none" // new empty net namespace, only loopback (up)
	NetworkAll  = "all"  // the host's net namespace
)

// Bind is a host directory bound read-write into a sandbox.
type Bind struct {
	Source string `json:"source"`
	Target string `json:"target"`
}

// Spec describes the sandbox to start.
type Spec struct {
	// Path is the binary to execute as the sandbox's init; "" means
	// /proc/self/exe. It must call IsChild/Child first thing in main.
	Path string
	// Args is argv (Args[0] included); nil means {Path}.
	Args []string
	// Env is the child's environment (nil = empty). The package adds one
	// variable of its own, which Child removes again.
	Env []string
	// ExtraFiles are passed as fds 3, 4, ... (like exec.Cmd.ExtraFiles).
	ExtraFiles []*os.File
	// Stdout and Stderr receive the init's output (nil = /dev/null). Pass an
	// *os.File when the sandbox must outlive the caller: any other writer is
	// fed by a goroutine of the calling process.
	Stdout, Stderr io.Writer

	Hostname string // default "sandbox"
	Network  string // NetworkNone (default), NetworkTUN or NetworkAll
	// Volumes are host directories bound read-write (nosuid, nodev) into
	// the sandbox, each at its Target (an absolute path the caller
	// checked; its missing directories are created on the sandbox's own
	// tmpfs mounts, a symlink on the way is refused).
	Volumes []Bind
	// Rootfs is the directory whose content becomes the sandbox's root,
	// read-only (the root directory itself is a writable tmpfs of the
	// sandbox's own, RootSizeBytes, so that mkdir /x works as on E2B; the
	// entries taken from the rootfs stay read-only binds); "" means the host's system directories (/usr, /bin, /sbin,
	// /lib*, /etc) and nothing else of the host. Either way the sandbox's
	// /proc, /dev, /tmp, /home/user and /files are its own (they need not
	// exist in the rootfs; a rootfs's own are hidden, as are its /home and
	// /sys, its /.code-sandboxes, and its /root when the sandbox has a root
	// user), and /etc/passwd, group, hostname and hosts are overlaid where
	// the rootfs has them. It must be a directory with /etc, /etc/passwd and
	// /etc/group, other than the host's root. Nothing is ever written to it.
	// The init binary is re-executed inside it: a dynamically linked one
	// needs a compatible dynamic loader and C library there.
	Rootfs string
	// ExecOnlyDir, when set, is a directory of the caller's (made if
	// missing, 0700) where an execute-only copy of Path is kept: the
	// sandbox executes that, so that none of its processes running this
	// binary is ever dumpable (execonly.go). "" executes Path itself.
	ExecOnlyDir string
	// Init, when set, is a smaller binary, opened by the caller (who
	// checked it: Start executes this open file, never a path again), that
	// runs stage 1 only (the setup, up to and with the early start,
	// SetEarlyStart) and then re-executes Path for stage 2, which Path
	// still runs (as the root broker and sudo). It must call
	// IsChild/ChildAsync first thing in main, with the same early start as
	// Path's stage 2 expects, and be built from the same source. Stage 1
	// then always re-executes (never hardens in place: the image it would
	// go on in is not Path's). It is executed on the host's filesystem,
	// before the sandbox's root exists, so a rootfs's C library doesn't
	// matter to it. Why: stage 1's Go start is on a sandbox's critical
	// path, and a binary that links only the setup starts in about half the
	// time and pages. With ExecOnlyDir it runs from an execute-only copy too.
	Init *os.File

	// Resource limits; 0 = unlimited. Enforced through cgroups v1 or v2.
	// If a limit is set but cannot be enforced, Start fails.
	MemoryBytes int64   // memory (and memory+swap, where the kernel accounts swap)
	CPUs        float64 // CFS quota, in CPUs (0.5 = half a CPU)
	Pids        int64   // max tasks (threads included) in the sandbox

	// HostUID and HostGID are the host ids the sandbox's user (1000) and
	// group (100) map to when the caller is root; 0 = RootModeHostUID and
	// RootModeHostGID. A caller giving each sandbox ids of its own keeps
	// what one sandbox does as its user (files, processes, rlimits that
	// count per uid) from counting for another. Ignored for other callers:
	// their sandboxes map to their own uid.
	HostUID, HostGID int
	// HostRootUID and HostRootGID, when set (root callers only), give the
	// sandbox a root user mapped to these host ids: uid 0 of a user
	// namespace nested in the sandbox's, with no capabilities, reached
	// through sudo (rootuser.go). 0 = no root in the sandbox.
	HostRootUID, HostRootGID int

	// Sizes of the tmpfs mounts; 0 = default (capped at half of
	// MemoryBytes, see TmpfsSize).
	HomeSizeBytes  int64 // /home/user
	FilesSizeBytes int64 // /files
	TmpSizeBytes   int64 // /tmp
	RootSizeBytes  int64 // the root directory's own tmpfs (/x, /0/file)
}

// ExitInfo describes how the sandbox's init ended.
type ExitInfo struct {
	ExitCode int            // -1 if killed by a signal
	Signal   syscall.Signal // non-zero if killed by a signal
	// OOMKilled: the sandbox's memory cgroup recorded at least one OOM kill
	// (of the init or of any other process in the sandbox).
	OOMKilled bool
	// PidsLimitHit: a fork/clone in the sandbox failed on the pids limit.
	PidsLimitHit bool
}

func (e ExitInfo) String() string {
	s := fmt.Sprintf("exit code %d", e.ExitCode)
	if e.Signal != 0 {
		s = fmt.Sprintf("killed by signal %d (%v)", int(e.Signal), e.Signal)
	}
	if e.OOMKilled {
		s += " (out of memory)"
	}
	if e.PidsLimitHit {
		s += " (pids limit hit)"
	}
	return s
}

// ReexecEnv, in a Spec's Env, chooses how stage 1 and the root broker
// reach their final stage: "1" re-executing (as where the process can't
// change every thread of its own, a cgo binary), "0" hardened in place
// (where it can); unset, inPlaceByDefault decides.
const ReexecEnv = "CODE_SANDBOXES_ISOLATE_REEXEC"

// HomeHint says, in the error of an environment whose /home/user doesn't
// fit the sandbox's home, how to give the home more room.
const HomeHint = "local.Options.HomeSize, or more Memory: the default home is half of it up to 1 GiB"
