package standalone

import (
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// What ProbeConnect prints: the kubernetes variant trusts these lines
// only, never an exit status, so a binary that doesn't know the probe
// (an older agent, the CLI's own error) is no answer.
const (
	ProbeReached = "code-sandboxes-probe: reached"
	ProbeRefused = "code-sandboxes-probe: not reached"
)

// ProbeConnect tries one TCP connection to HOST PORT (args) for at most a
// second and prints whether it got through: the kubernetes variant's check,
// from inside a pod, that its NetworkPolicy is in force.
func ProbeConnect(args []string) int {
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: HOST PORT")
		return 2
	}
	c, err := net.DialTimeout("tcp", net.JoinHostPort(args[0], args[1]), time.Second)
	if err != nil {
		fmt.Println(ProbeRefused)
		return 0
	}
	c.Close()
	fmt.Println(ProbeReached)
	return 0
}

// ProbeAnswer reads a probe's output: whether it reached, and whether the
// output was an answer at all.
func ProbeAnswer(out string) (reached, ok bool) {
	switch strings.TrimSpace(out) {
	case ProbeReached:
		return true, true
	case ProbeRefused:
		return false, true
	}
	return false, false
}
