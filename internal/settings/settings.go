// Package settings declares every CODE_SANDBOXES_* environment variable
// the project reads, in one place: its name, its default and one line on
// what it does. The README's settings table is generated from it (make
// generate; a test fails when the two differ), a test fails when the code
// or the scripts name a variable not declared here, and the CLI warns
// about a CODE_SANDBOXES_* variable in its environment that no version of
// this list knows (a typo is otherwise silently ignored).
//
// The code reads each variable where it is used (os.Getenv of the
// declared name), as before: this is the list, not a second way to read.
package settings

import (
	"fmt"
	"os"
	"slices"
	"strings"
)

// Scope says who sets a variable.
type Scope string

const (
	// User: operators and users of the CLI, serve and the library.
	User Scope = "user"
	// Internal: the project's own processes hand it to each other (a
	// role, a descriptor, a spec); setting it by hand breaks things.
	Internal Scope = "internal"
	// Test: the tests, the benchmarks and the scripts that run them.
	Test Scope = "test"
)

// Var is one environment variable.
type Var struct {
	Name    string
	Default string // what applies when it is unset ("" when nothing does)
	Doc     string
	Scope   Scope
}

// Prefix starts every variable's name.
const Prefix = "CODE_SANDBOXES_"

// All lists every variable, sorted by name.
var All = []Var{
	{"CODE_SANDBOXES_CHECKPOINT_TIMEOUT", "derived from the sandbox's memory", "how long a gVisor pause or snapshot may take before it is given up (a Go duration)", User},
	{"CODE_SANDBOXES_DNS", "", "the resolver a local sandbox's DNS forwards to, host:port (the tests' own zone on loopback)", Test},
	{"CODE_SANDBOXES_DOCKER_RUNTIME_DIR", "/run/code-sandboxes-docker (root)", "where the docker variant keeps each sandbox's directory (its agent's run/ is bound from it)", User},
	{"CODE_SANDBOXES_EARLY_KERNEL", "on", "0: the agent starts a sandbox's default kernel itself, not the sandbox's first stage", User},
	{"CODE_SANDBOXES_ENV", "", "the sandbox's own variables (JSON) handed to a pod's agent from a Secret", Internal},
	{"CODE_SANDBOXES_ENVD_FS_HELPER", "", "marks the agent's helper process for file operations as another user", Internal},
	{"CODE_SANDBOXES_ENV_DIR", "/var/lib/code-sandboxes/environments (root)", "the environment store: built root filesystems and templates", User},
	{"CODE_SANDBOXES_HOST_UID_REGISTRY", "/run/code-sandboxes-host-uids", "the directory of host-wide claims on host uids (one per docker sandbox)", User},
	{"CODE_SANDBOXES_ISOLATE", "", "the configuration of a sandbox's first stage; its presence marks that process", Internal},
	{"CODE_SANDBOXES_ISOLATE_BROKER_FAIL", "", "makes the root broker fail at a given step (fault tests)", Test},
	{"CODE_SANDBOXES_ISOLATE_GC_AFTER_BROKER", "", "runs the Go collector right after the root broker starts (TestRootUserUnderGC)", Test},
	{"CODE_SANDBOXES_ISOLATE_REEXEC", "decided per binary", "1: a sandbox's stages re-execute the binary; 0: they harden in place", User},
	{"CODE_SANDBOXES_ISOLATE_SLOW_BROKER", "", "slows the root broker down (race tests)", Test},
	{"CODE_SANDBOXES_K8S", "on", "off: scripts/with-k8s.sh runs its command without a cluster", Test},
	{"CODE_SANDBOXES_K8S_CACHE", "/var/cache/code-sandboxes/k8s", "where the test cluster's built binaries and images are kept", Test},
	{"CODE_SANDBOXES_K8S_IMPORT", "", "the command prefix that loads an image tarball into the test cluster (set by with-k8s.sh)", Test},
	{"CODE_SANDBOXES_K8S_KEEP_ON_FAILURE", "", "1: leave the test cluster up when bringing it up fails, to look at it", Test},
	{"CODE_SANDBOXES_K8S_LOCK_HELD", "", "the cluster lock is held by a caller (with-k8s.sh to k8s-cluster.sh)", Internal},
	{"CODE_SANDBOXES_K8S_LOCK_TIMEOUT", "1800", "seconds a run waits for another run's test cluster", Test},
	{"CODE_SANDBOXES_K8S_LOGS_DIR", "under the run directory", "where the test cluster's daemons write their logs", Test},
	{"CODE_SANDBOXES_K8S_NETWORKPOLICY", "", "enforced: the test cluster runs a NetworkPolicy controller (kube-router); set by k8s-cluster.sh", Test},
	{"CODE_SANDBOXES_K8S_NETWORKPOLICY_ENFORCED", "", "1: the cluster's network plugin enforces NetworkPolicy (kubernetes.Options.NetworkPolicyEnforced)", User},
	{"CODE_SANDBOXES_K8S_NODE_IP", "a documentation address", "the test cluster node's address", Test},
	{"CODE_SANDBOXES_K8S_RUN_DIR", "/run/code-sandboxes-k8s", "the test cluster's state: kubeconfig, sockets, logs", Test},
	{"CODE_SANDBOXES_MCPSERVER_TEST_STDIO", "", "makes the mcpserver test binary serve MCP on stdio", Test},
	{"CODE_SANDBOXES_MCPTEST_SERVE", "", "1: a test binary serves the test MCP server on stdio and exits", Test},
	{"CODE_SANDBOXES_MCP_TOKEN", "generated and printed", "the bearer token `code-sandboxes mcp --listen` requires (--token)", User},
	{"CODE_SANDBOXES_NET_SPEC", "", "the network supervisor's spec, for a docker sandbox's network", Internal},
	{"CODE_SANDBOXES_POOL_FD", "", "the descriptor of a local warm pool's supervisor socket", Internal},
	{"CODE_SANDBOXES_ROLE", "", "which of its roles a code-sandboxes binary runs (agent, supervisor, stage...)", Internal},
	{"CODE_SANDBOXES_RUNSC", "runsc from PATH", "the runsc binary for isolation gvisor", User},
	{"CODE_SANDBOXES_RUNTIME_DIR", "/run/code-sandboxes (root)", "where the local variant keeps its sandboxes' records and sockets", User},
	{"CODE_SANDBOXES_SANDBOX_BINARY", "code-sandboxes-sandbox beside the program", "the lean binary local sandboxes' processes run from", User},
	{"CODE_SANDBOXES_SHIM_SPARE", "", "marks a local sandbox supervisor started as a spare", Internal},
	{"CODE_SANDBOXES_SHIM_SPEC", "", "a local sandbox supervisor's spec", Internal},
	{"CODE_SANDBOXES_SPARE_SUPERVISOR", "1", "0: no spare local supervisor is kept started ahead", User},
	{"CODE_SANDBOXES_SPIN_WAIT", "500µs", "how long a caller spins for a cell's answer before sleeping (0: never)", User},
	{"CODE_SANDBOXES_STATE_DIR", "/var/lib/code-sandboxes", "paused sandboxes, snapshots and their sealing key", User},
	{"CODE_SANDBOXES_TEST_ENV_DIR", "the default store", "the environment store the tests build and use", Test},
	{"CODE_SANDBOXES_TEST_SHIM_STALL", "", "makes a local supervisor stall at start (fault tests)", Test},
	{"CODE_SANDBOXES_TEST_UNPRIVILEGED_RT", "", "a runtime directory for the unprivileged-caller tests", Test},
	{"CODE_SANDBOXES_TOKEN", "", "the access token handed to a pod's agent from a Secret", Internal},
	{"CODE_SANDBOXES_TOOLS_SOCKET", "", "inside a sandbox: the socket its code calls the caller's tools through", Internal},
	{"CODE_SANDBOXES_TRACE", "", "a file every process of a local sandbox's start appends timed marks to", User},
	{"CODE_SANDBOXES_TRACE_FD", "", "the descriptor of the trace file, handed down a sandbox's start", Internal},
	{"CODE_SANDBOXES_VOLUME_DIR", "/var/lib/code-sandboxes/volumes (root)", "where `code-sandboxes volumes create` keeps named volumes", User},
}

// Lookup returns the declared variable name.
func Lookup(name string) (Var, bool) {
	i, ok := slices.BinarySearchFunc(All, name, func(v Var, n string) int { return strings.Compare(v.Name, n) })
	if !ok {
		return Var{}, false
	}
	return All[i], true
}

// Unknown returns the CODE_SANDBOXES_* names in environ (os.Environ's
// shape) that are not declared, sorted.
func Unknown(environ []string) []string {
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, Prefix) {
			if _, ok := Lookup(name); !ok {
				out = append(out, name)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// WarnUnknown prints one line per unknown variable in the process's
// environment to stderr: a misspelt setting is otherwise ignored.
func WarnUnknown(prog string) {
	for _, name := range Unknown(os.Environ()) {
		fmt.Fprintf(os.Stderr, "%s: warning: %s is not a setting of this version (the README's \"Settings\" table lists them); it is ignored\n", prog, name)
	}
}

// Table is the README's settings table (Markdown): every variable users
// and operators set, then the tests' and the scripts'. Internal ones are
// left out: nobody should set them.
func Table() string {
	var b strings.Builder
	b.WriteString("| variable | default | what it does |\n| --- | --- | --- |\n")
	for _, scope := range []Scope{User, Test} {
		for _, v := range All {
			if v.Scope != scope {
				continue
			}
			def := v.Default
			if def == "" {
				def = "—"
			}
			doc := v.Doc
			if scope == Test {
				doc = "(tests) " + doc
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", v.Name, def, doc)
		}
	}
	return b.String()
}

// The README's table sits between these markers.
const (
	BeginMarker = "<!-- settings table: generated by make generate from internal/settings -->"
	EndMarker   = "<!-- end of settings table -->"
)

// ReadmeSection returns what the README holds between the markers.
func ReadmeSection(readme string) (string, bool) {
	_, rest, ok := strings.Cut(readme, BeginMarker+"\n")
	if !ok {
		return "", false
	}
	table, _, ok := strings.Cut(rest, EndMarker)
	return table, ok
}

// ReplaceReadmeSection returns readme with the table between the markers
// replaced by Table().
func ReplaceReadmeSection(readme string) (string, error) {
	before, rest, ok := strings.Cut(readme, BeginMarker+"\n")
	if !ok {
		return "", fmt.Errorf("no %q line in the README", BeginMarker)
	}
	_, after, ok := strings.Cut(rest, EndMarker)
	if !ok {
		return "", fmt.Errorf("no %q after the table in the README", EndMarker)
	}
	return before + BeginMarker + "\n" + Table() + EndMarker + after, nil
}
