package local

import (
	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/earlystart"
	"github.com/code-sandboxes/code-sandboxes/internal/isolate"
)

// Options are the local variant's own settings (sandboxes.LocalConfig).
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
	// and hands one out instead of starting a sandbox: see pool.go for what
	// is pooled and what starts cold. The pools live in this process,
	// are refilled one sandbox at a time, and end with ClosePools or with
	// the process (their supervisors notice).
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

func optionsOf(spec driver.Spec) (Options, error) { return driver.OptionsOf[Options](spec) }

// Resolved returns o with RuntimeDir resolved to where the variant keeps
// its sandboxes now (from the environment when empty), so that a later
// change of the environment can't split a long-running caller's sandboxes.
func (o Options) Resolved() Options {
	o.RuntimeDir = runtimeDir(o.RuntimeDir)
	return o
}

// EarlyKernelEnv, "0" in the environment of the program that creates local
// sandboxes, makes the agent start each sandbox's default python kernel
// itself, as before, instead of the sandbox's stage 1 right before its
// re-exec into the agent (earlystart.Start). The early start measured
// 1.3-3.3 ms faster on an idle 2-core host (bench -ab with -ab-b-env, 30-60
// pairs, six runs; A/A noise 0.2 ms), and no better, up to a few ms worse,
// on a busy one, where python becomes a third CPU-bound start beside the
// agent's re-exec and the root broker's two.
const EarlyKernelEnv = earlystart.KernelEnv

// ReexecEnv, in the environment of the program that creates local
// sandboxes, chooses how each sandbox's stage 1 and root broker reach
// their final stage: "0" hardened in place (every thread at once, where
// the binary can: not with cgo), "1" re-executing; unset, isolate's
// default (re-executing: see isolate.inPlaceByDefault for why).
const ReexecEnv = isolate.ReexecEnv
