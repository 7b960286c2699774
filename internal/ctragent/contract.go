package ctragent

import (
	"os"

	"github.com/code-sandboxes/code-sandboxes/internal/agentconfig"
)

// What the host and the agent share: the run directory's paths, the
// config, the pause handshake's files, the agent's roles and uid. This
// file builds everywhere, because the docker variant's host side, which the
// root package links, uses it; the agent itself (agent.go, pause.go, userns.go,
// owncreds.go) runs in a Linux container and is Linux only
// (ctragent_other.go refuses elsewhere).

// Paths inside the container.
const (
	// RunDir is the root-owned directory the docker variant binds in
	// (Run's runDir): ConfigFile
	// (removed once read) and SocketFile.
	RunDir     = "/run/code-sandboxes"
	ConfigFile = "config.json"
	SocketFile = "agent.sock"
)

// Config is what the host hands the agent, in run/config.json (the
// same fields as the local variant's; not the environment, which user code
// could read in /proc/1/environ).
type Config struct {
	agentconfig.Base
	// SocketMode is the agent socket's mode: 0600 when the host side is
	// root (who connects whatever the owner), so code in the sandbox can't
	// even connect; 0 = 0666, for callers that aren't root (the token is
	// then the only gate, as it always is for everything but /health).
	SocketMode os.FileMode `json:"socket_mode,omitempty"`
	// HostUID is the sandbox's own host uid (and gid), from
	// records.DockerUIDs: the contract's uid 1000 and gid 100 map to it
	// (userns.go). 0 = none (gVisor sandboxes).
	HostUID int `json:"host_uid,omitempty"`
	// Pausable puts the socket in CtlDir (the sandbox user's, inside the
	// root-owned run directory) so that the agent, no longer root, can
	// close it before a checkpoint and open it again after a restore
	// (quiesce.go): the local variant under gVisor sets it.
	Pausable bool `json:"pausable,omitempty"`
	// AgentUID, when set (the local variant under gVisor), is a uid of the
	// agent's own, kept as its saved uid: what the agent must keep from
	// the sandbox's code, which runs as its real and effective uid, is
	// made under it (owncreds.go).
	AgentUID int `json:"agent_uid,omitempty"`
	// SeedHome: the environment's /home/user is mounted read-only at
	// homeseed.Dir, and the agent copies it into the home (bounded by the
	// home tmpfs's size and inodes) as the sandbox's user before any user
	// code runs; a seed that doesn't fit ends the sandbox with
	// homeseed.TooBig in its message.
	SeedHome bool `json:"seed_home,omitempty"`
}

// The pause handshake with the host (the local variant under gVisor): the
// host sends SIGUSR2 (runsc kill), the agent closes its socket and every
// connection (gVisor can't checkpoint host sockets) and creates
// QuiescedFile; after the restore the host sends SIGUSR1 and the agent
// listens again. Code in the sandbox runs as the agent's uid and can send
// these signals too: all it gains is an agent that stops answering until
// the next SIGUSR1, which it could get by killing its own sandbox anyway.
const (
	// CtlDir is the directory in the run directory where a pausable
	// agent's socket and QuiescedFile are: the agent's own uid's
	// (Config.AgentUID), or the sandbox user's without one.
	CtlDir       = "ctl"
	QuiescedFile = "quiesced"
	// IdentityFile, written by the host before the restore of a fork,
	// holds the new sandbox's id and token (IdentityFile's JSON is
	// Identity); the agent reads and removes it.
	IdentityFile = "identity.json"
)

// Identity is a forked sandbox's own id and token.
type Identity struct {
	ID    string `json:"id"`
	Token string `json:"token"`
}

// RequestFile, in CtlDir, is written by the host before each signal of the
// handshake ("quiesce" before SIGUSR2, "resume" before SIGUSR1): a signal
// without it is ignored, so that code in the sandbox, which runs as the
// agent's uid and may signal it, doesn't make it stop answering by sending
// SIGUSR2 (the hostile suite's SignalAgent did). (Under gVisor that code can
// still reach the agent's descriptors through /proc/1/fd: SECURITY.md; it
// only ever harms its own sandbox.)
const RequestFile = "request"

// InnerRole is the CODE_SANDBOXES_ROLE value of the agent proper; the
// program's role dispatch calls RunInner for it.
const InnerRole = "docker-agent-inner"

// GVisorAgentUID is the agent's own uid under gVisor (local and docker).
const GVisorAgentUID = 999
