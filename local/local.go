// Package local adds the local variant to sandboxes: each sandbox is a
// tree of processes on this machine in namespaces of its own (or under
// gVisor), with a python kernel, files, commands and a network policy.
//
//	import (
//		sandboxes "github.com/code-sandboxes/code-sandboxes"
//		"github.com/code-sandboxes/code-sandboxes/local"
//	)
//
//	sb, err := sandboxes.Create(ctx, sandboxes.Config{Options: local.Options{WarmPool: 2}})
//
// local is the default variant (Config.Variant ""), but like every variant
// it is compiled in only by importing this package: a program that runs
// only, say, e2b sandboxes links none of the local variant's code.
// Importing it also makes the program its own sandbox agent and supervisor:
// when re-executed in one of those roles, this package's init runs that
// role and exits before the program's main.
package local

import (
	"context"

	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/local"
	"github.com/code-sandboxes/code-sandboxes/internal/local/envstore"
)

func init() {
	local.Main()
	local.UseEnvironmentStore(envstore.Store{})
	driver.Register(local.Variant{})
}

// Options are the local variant's settings (Config.Options).
type Options struct {
	// RuntimeDir keeps sandbox records and sockets; default
	// $CODE_SANDBOXES_RUNTIME_DIR, else /run/code-sandboxes (root) or
	// $XDG_RUNTIME_DIR/code-sandboxes. Programs that must not see (or
	// Kill) each other's sandboxes give each its own.
	RuntimeDir string
	// Python is the interpreter inside the sandbox; default python3 from PATH
	// (/usr/local/bin:/usr/bin:/bin).
	Python string
	// WarmPool keeps this many sandboxes started ahead (agent answering,
	// kernel up, no code run) for each shape of Create that can use one,
	// and hands one out instead of starting a sandbox. The pools live in
	// this process, are refilled one sandbox at a time, and end with
	// CloseWarmPools or with the process (their supervisors notice).
	WarmPool int
	// HomeSize is the size of /home/user, a tmpfs (0 = the default: 1 GiB,
	// at most half the memory limit). Its pages count against the memory
	// limit, so it may be at most half of it (any size without one).
	HomeSize int64
	// SandboxBinary is the absolute path of a binary to run this sandbox's
	// own processes (supervisor, agent, sudo) instead of this program
	// re-executed: cmd/code-sandboxes-sandbox built from the same source,
	// which links only the local variant, so each of those processes starts
	// faster and smaller than a program linking every variant would. It is
	// asked for its protocol fingerprint (once per file, remembered in the
	// user's cache directory by the file's identity) and a mismatch
	// fails Create with ErrInvalidConfig. "" = $CODE_SANDBOXES_SANDBOX_BINARY,
	// else the one beside this program when it called
	// UseSandboxBinaryBeside (the CLI and serve do), else this program.
	// Resume (after Pause) uses that default, not this field.
	SandboxBinary string
	// NoRootUser leaves out the root user a sandbox otherwise has when this
	// program runs as root (sudo inside, E2B's user "root" for commands and
	// files, served by a broker process per sandbox): without it, only the
	// sandbox's user exists, and a sandbox has one process (and its start
	// one more run of the binary) fewer, which shortens a cold start on a
	// busy or small host. Callers that aren't root never get a root user.
	NoRootUser bool
}

// The variant's own copy of Options has the same fields: the driver
// converts one to the other, and this line stops the build if they part.
var _ = local.Options(Options{})

// PoolStats counts the warm pools' activity (Options.WarmPool) in this
// process.
type PoolStats struct {
	// Hits: Creates served from a pool; Misses: Creates that could use one
	// and found none ready (they started cold).
	Hits, Misses int64
	// Ready sandboxes waiting in pools; Starting ones being made for them.
	Ready, Starting int
	// Failures of fills, and the last one's message.
	Failures  int64
	LastError string
}

// WarmPoolStats returns the warm pools' counters.
func WarmPoolStats() PoolStats { return PoolStats(local.Stats()) }

// CloseWarmPools ends this process's warm pools and the sandboxes waiting
// in them, and its spare supervisors (started ahead of a cold Create), and
// returns once those are cleaned up; sandboxes already handed out are not
// touched. Without it a pool's sandboxes end when the process exits (their
// supervisors notice).
func CloseWarmPools(ctx context.Context) { local.ClosePools(ctx) }

// UseSandboxBinaryBeside makes local sandboxes' own processes run from the
// code-sandboxes-sandbox (cmd/code-sandboxes-sandbox, built from the same
// source) in the same directory as this program's executable, when there
// is one and neither Options.SandboxBinary nor
// $CODE_SANDBOXES_SANDBOX_BINARY names another. A stale one (another
// build's protocol) fails Create with ErrInvalidConfig and what to do; it
// never runs. The code-sandboxes CLI and serve call it first thing.
func UseSandboxBinaryBeside() { local.UseSandboxBinaryBeside() }
