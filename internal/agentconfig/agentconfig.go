// Package agentconfig is what every variant's host side hands a sandbox's
// agent alike: its identity, its token, where and how its code runs and
// for how long. The local variant's config (earlystart.AgentConfig) and the
// container agent's (ctragent.Config) embed it and add what is theirs, so a
// field the agent needs everywhere is declared, and documented, once. Its
// JSON is flat in theirs (an embedded struct's fields are promoted), the
// wire format both agents read.
//
// It imports nothing of ours: cmd/code-sandboxes-init links it and must
// stay small (earlystart).
package agentconfig

import "time"

// Base is the part of an agent's config that every variant sets.
type Base struct {
	// ID is the sandbox's id; Token the secret every request to its agent
	// carries (the agent refuses any other).
	ID    string `json:"id"`
	Token string `json:"token"`
	// Python is the default kernel's interpreter ("" = python3 from the
	// sandbox's PATH).
	Python string `json:"python"`
	// Workdir is the directory code runs in; Env what is added to the
	// sandbox contract's environment.
	Workdir string            `json:"workdir"`
	Env     map[string]string `json:"env"`
	// Lifetime ends the sandbox this long after its agent starts.
	Lifetime time.Duration `json:"lifetime"`
	// IdleTimeout ends the sandbox after this long unused (0 = never).
	IdleTimeout time.Duration `json:"idle_timeout,omitempty"`
	// NoPrewarm leaves the default kernel to start on first use (a kernel
	// started before pip ran would not see the user site directory pip
	// creates).
	NoPrewarm bool `json:"no_prewarm,omitempty"`
}
