//go:build !linux

package earlystart

import (
	"fmt"
	"os"
)

// InitMain: local sandboxes need Linux.
func InitMain() {
	fmt.Fprintf(os.Stderr, "%s runs the first stage of local sandboxes, which need Linux\n", InitName)
	os.Exit(2)
}
