// Package toolproto is what the host side of tool calls and the
// in-sandbox agent agree on: the bounds of a call and what a tool may be
// named. Both import it, so the host checks a name without linking the
// agent.
package toolproto

import (
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"
)

// Bounds of tool calls. A sandbox's code is hostile: it may flood calls,
// send giant arguments, or never read its answer.
const (
	// MaxToolArgBytes bounds one call's JSON arguments.
	MaxToolArgBytes = 1 << 20
	// MaxToolResultBytes bounds one call's JSON result (or error message).
	MaxToolResultBytes = 4 << 20
	// MaxToolCalls bounds the calls in progress at once (connections to
	// the socket included); more are refused at once, never queued.
	MaxToolCalls = 64
	// MaxTools bounds how many tools one sandbox may be granted.
	MaxTools = 256
	// DefaultToolTimeout bounds one call when the host gives no timeout.
	DefaultToolTimeout = 60 * time.Second
)

// ToolNamePattern is what a tool name must match: a Python identifier that
// doesn't start with "_" (the module's own names do), at most 64 bytes.
// Compiled on first use, not at the start of every sandbox process.
var ToolNamePattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]{0,63}$`) })

// pythonReserved are names a tool can't take: Python keywords (not callable
// as tools.<name>) and the names the tools module defines itself.
var pythonReserved = map[string]bool{
	"False": true, "None": true, "True": true, "and": true, "as": true, "assert": true, "async": true,
	"await": true, "break": true, "class": true, "continue": true, "def": true, "del": true, "elif": true,
	"else": true, "except": true, "finally": true, "for": true, "from": true, "global": true, "if": true,
	"import": true, "in": true, "is": true, "lambda": true, "nonlocal": true, "not": true, "or": true,
	"pass": true, "raise": true, "return": true, "try": true, "while": true, "with": true, "yield": true,
	"ToolError": true, "ToolTimeout": true, "ToolUnavailable": true, "call": true, "describe": true, "names": true,
}

// ErrToolName is a tool name that can't be a Python function of the tools module.
var ErrToolName = errors.New("invalid tool name")

// CheckToolName says why name can't be a tool's name, or nil.
func CheckToolName(name string) error {
	if !ToolNamePattern().MatchString(name) {
		return fmt.Errorf("%w %q: use a Python identifier of at most 64 characters that starts with a letter (letters, digits, _)", ErrToolName, name)
	}
	if pythonReserved[name] {
		return fmt.Errorf("%w %q: it is a Python keyword or a name the tools module defines itself; pick another", ErrToolName, name)
	}
	return nil
}
