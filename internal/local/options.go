package local

import (
	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/earlystart"
	"github.com/code-sandboxes/code-sandboxes/internal/isolate"
)

// Options are the variant's settings: the public local.Options, whose
// fields (documented there) this copy has one for one; driver.OptionsOf
// converts the caller's to it.
type Options struct {
	RuntimeDir    string
	Python        string
	WarmPool      int
	HomeSize      int64
	SandboxBinary string
	NoRootUser    bool
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
