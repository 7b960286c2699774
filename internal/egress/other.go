//go:build !linux

package egress

import (
	"errors"
	"os"
)

// Options are the stack's settings other than the policy.
type Options struct {
	DNS  []string
	Logf func(format string, args ...any)
}

// Stack is the network of one sandbox (Linux only).
type Stack struct{}

// Start fails: the stack needs Linux.
func Start(tun *os.File, p Policy, o Options) (*Stack, error) {
	tun.Close()
	return nil, errors.New("egress: sandbox networks need Linux")
}

func (s *Stack) Logf(format string, args ...any) {}
func (s *Stack) SetPolicy(p Policy) error        { return errors.New("egress: sandbox networks need Linux") }
func (s *Stack) Close()                          {}
