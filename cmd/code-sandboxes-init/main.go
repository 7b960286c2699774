// Command code-sandboxes-init runs the first stage of a local sandbox (its
// setup, and the start of its default python kernel) before the sandbox
// re-executes into code-sandboxes-sandbox for its agent. It links only that
// stage, so it starts in about half the time and page faults of the sandbox
// binary, on the one Go start left on a cold start's path before python's.
// A caller uses it when it lies beside the sandbox binary (make build puts
// it there) and reports the caller's fingerprint; otherwise the sandbox
// binary runs stage 1 itself.
package main

import "github.com/code-sandboxes/code-sandboxes/internal/earlystart"

func main() { earlystart.InitMain() }
