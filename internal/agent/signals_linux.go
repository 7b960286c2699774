package agent

import (
	"os"
	"syscall"
)

// osSignals are the catchable signals only Linux has (IgnoreSignals).
var osSignals = []os.Signal{syscall.SIGSTKFLT, syscall.SIGPWR}
