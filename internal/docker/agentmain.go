package docker

import (
	"os"

	"github.com/code-sandboxes/code-sandboxes/internal/ctragent"
)

// The re-executed binary's role, chosen by roleEnv (the variable the local
// variant's roles use too; the values differ).
const (
	roleEnv   = "CODE_SANDBOXES_ROLE"
	roleAgent = "docker-agent"
)

// Paths inside the container (the agent is internal/ctragent, shared with
// the local variant's gVisor sandboxes).
const (
	agentInContainer = "/usr/local/libexec/code-sandboxes-agent"
	runInContainer   = ctragent.RunDir
	configFile       = ctragent.ConfigFile
	socketFile       = ctragent.SocketFile
)

// The sandbox contract's user (DESIGN §4).
const (
	sandboxUID = 1000
	sandboxGID = 100
)

// agentConfig is what the host hands the agent, in run/config.json.
type agentConfig = ctragent.Config

// Main runs the container agent when this process was started as one (the
// env var roleEnv says so) and exits; it returns normally otherwise. The
// public package calls it from init, so any static binary that imports it
// can be a docker sandbox's init.
func Main() {
	switch os.Getenv(roleEnv) {
	case roleAgent:
		os.Exit(ctragent.Run("docker agent", runInContainer))
	case ctragent.InnerRole:
		os.Exit(ctragent.RunInner("docker agent"))
	case roleNetwork:
		os.Exit(runNetwork())
	}
}

// gvisorAgentUID: see ctragent.GVisorAgentUID.
const gvisorAgentUID = ctragent.GVisorAgentUID
