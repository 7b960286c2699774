//go:build !linux

package testnet

import "errors"

// The test internet is a network namespace joined to the host by a veth
// pair (testnet.go): Linux only. Elsewhere Start refuses, so that the
// packages and tests that use it still build (the e2b variant's tests run
// on macOS); a test that needs the test internet fails with this error.
var errNeedsLinux = errors.New("testnet: the test internet needs Linux (network namespaces, veth pairs, iproute2) and root")

// Net is a running test internet; none runs here.
type Net struct {
	NS  string
	DNS string
}

// Start fails: see errNeedsLinux.
func Start() (*Net, error) { return nil, errNeedsLinux }

func (n *Net) Close() error                   { return nil }
func (n *Net) Hits(string) int                { return 0 }
func (n *Net) Forward(string) (string, error) { return "", errNeedsLinux }
