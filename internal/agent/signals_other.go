//go:build !linux

package agent

import "os"

// osSignals: the agent runs in a Linux sandbox; elsewhere (the package
// only builds there) there are none beyond the common ones.
var osSignals []os.Signal
