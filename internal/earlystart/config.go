// Package earlystart is a local sandbox's stage 1 past its isolation: it
// starts the sandbox's default python kernel right before the re-exec into
// the agent (stage 2), which adopts it. It links only what that needs
// (isolate, kernel, cpupin, sandboxenv: no HTTP, no protobuf), so that
// cmd/code-sandboxes-init, the small binary a sandbox's stage 1 runs when
// it is there, starts fast: stage 1's Go start is the one left on a cold
// start's path before python's.
package earlystart

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"reflect"
	"runtime/debug"
	"strings"
	"sync"

	"github.com/code-sandboxes/code-sandboxes/internal/agentconfig"
	"github.com/code-sandboxes/code-sandboxes/internal/isolate"
)

// AgentConfig is what a local sandbox's supervisor hands its agent, through
// a pipe at ConfigFD (not the environment, which user code could read).
type AgentConfig struct {
	agentconfig.Base
	// KernelBytecodeFD is the agent's fd of the kernel's bytecode file
	// (the tag, a newline, the pyc), for the agent to put where the kernel
	// looks (kernel.InstallBytecode); 0 = none.
	KernelBytecodeFD int `json:"kernel_bytecode_fd,omitempty"`
}

// ConfigFD is the agent's config (a pipe from the supervisor; in stage 2 a
// copy stage 1 made of what it read there).
const ConfigFD = 4

// MaxConfig bounds the config the agent reads.
const MaxConfig = 1 << 20

// KernelEnv, "0" in the environment of the program that creates local
// sandboxes, makes the agent start each sandbox's default python kernel
// itself instead of stage 1 (Start).
const KernelEnv = "CODE_SANDBOXES_EARLY_KERNEL"

// State is what stage 1 tells stage 2 about its early start.
type State struct {
	// Bytecode: the kernel's bytecode is installed (stage 2 only closes
	// its fd).
	Bytecode bool `json:"bytecode,omitempty"`
	// Pid and FDs (stdout, stderr, commands, events) of the default python
	// kernel, 0 = none started.
	Pid int    `json:"pid,omitempty"`
	FDs [4]int `json:"fds,omitempty"`
	// Tools is the tools socket's path the kernel was given.
	Tools string `json:"tools,omitempty"`
}

// The roles a sandbox's binaries are run for, chosen by RoleEnv; only
// RoleFingerprint is the init binary's (its other role is isolate's
// child, which isolate's own variable chooses).
const (
	RoleEnv         = "CODE_SANDBOXES_ROLE"
	RoleFingerprint = "fingerprint"
)

// InitName is cmd/code-sandboxes-init's file name, the one a local
// sandbox's caller looks for beside the sandbox binary.
const InitName = "code-sandboxes-init"

// initVersion is bumped when what stage 1 exchanges changes in a way the
// types in Fingerprint don't show (fd numbers, environment variables).
const initVersion = 1

// Fingerprint identifies what the init binary exchanges: with the
// supervisor that starts it (isolate's config), with the agent it
// re-executes into (the config, State). A caller runs the init binary only
// if it reports the fingerprint the caller computes.
func Fingerprint() string {
	return Shapes(initVersion, isolate.ConfigShape(), AgentConfig{}, State{})
}

// Stamp is a binary's full fingerprint: shapes (Fingerprint's, or the
// sandbox binary's protocol) and, when the build knows it, which build this
// is (BuildID). Compatible compares two.
func Stamp(shapes string) string {
	if id := BuildID(); id != "" {
		return shapes + " " + id
	}
	return shapes
}

// Compatible reports whether a binary that printed got may serve a caller
// whose own Stamp is want: the same shapes, and, when the caller knows its
// own build and it is a clean one, the same build (a binary without one is
// then refused too). A caller that doesn't know its build (go test
// binaries aren't stamped, nor builds with -buildvcs=false) or can't tell
// one state of its tree from another (+dirty) judges by the shapes alone.
// The build matters beyond the shapes: stage 1 does all of a sandbox's
// hardening, and an init left over from an older build would run its older
// hardening with unchanged shapes.
func Compatible(got, want string) bool {
	gs, gid, _ := strings.Cut(strings.TrimSpace(got), " ")
	ws, wid, _ := strings.Cut(want, " ")
	if gs != ws {
		return false
	}
	if wid == "" || strings.HasSuffix(wid, dirty) {
		return true
	}
	return gid == wid
}

// dirty ends the BuildID of a build from a tree with changes.
const dirty = "+dirty"

// modulePath is this project's module, whose build BuildID names.
const modulePath = "github.com/code-sandboxes/code-sandboxes"

// BuildID names the build of this project's code in this binary: the
// module's version (a release, or since Go 1.24 a pseudo-version of the
// commit a plain go build was made from, +dirty with changes), in the
// program itself or as the dependency of a program that imports it (what
// its go.sum pinned); else the commit it was built from; else "" (not
// stamped: go test, -buildvcs=false, a replace by a local directory).
var BuildID = sync.OnceValue(func() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	if bi.Main.Path != modulePath {
		for _, d := range bi.Deps {
			if d.Path == modulePath {
				if d.Replace != nil {
					d = d.Replace
				}
				return d.Version
			}
		}
		return ""
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev != "" && modified == "true" {
		rev += dirty
	}
	return rev
})

// Shapes is a fingerprint of version and the shape (field names, types,
// JSON tags) of the values' types.
func Shapes(version int, values ...any) string {
	var b strings.Builder
	fmt.Fprintf(&b, "v%d\n", version)
	seen := map[reflect.Type]bool{}
	for _, v := range values {
		describeType(&b, reflect.TypeOf(v), seen)
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:12])
}

func describeType(b *strings.Builder, t reflect.Type, seen map[reflect.Type]bool) {
	fmt.Fprintf(b, "%s %s %s\n", t.PkgPath(), t.String(), t.Kind())
	if seen[t] {
		return
	}
	seen[t] = true
	switch t.Kind() {
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			fmt.Fprintf(b, " %s %q\n", f.Name, f.Tag)
			describeType(b, f.Type, seen)
		}
	case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
		if t.Kind() == reflect.Map {
			describeType(b, t.Key(), seen)
		}
		describeType(b, t.Elem(), seen)
	}
}
