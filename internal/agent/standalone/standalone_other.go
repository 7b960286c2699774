//go:build !linux

package standalone

import (
	"errors"
	"os"
)

// The standalone agent runs in a Linux pod (the kubernetes variant); it
// builds elsewhere only because the host side uses this package's
// constants. Its -sandbox mode refuses: there is no PR_SET_DUMPABLE to
// keep the token from user code.
func notDumpable() error {
	return errors.New("the sandbox agent needs Linux (prctl PR_SET_DUMPABLE); it runs in the kubernetes variant's Linux pods")
}

var osSignals []os.Signal

func seedHomeDir() error {
	return errors.New("seeding the home needs Linux; the sandbox agent runs in the kubernetes variant's Linux pods")
}
