package e2bserver

import "testing"

// Issue #42 item 6 through the official SDK: E2B's sandbox.pty against
// serve (size, envs, cwd, input, resize, ^C, exit status, connect by pid,
// kill).
func TestOfficialJSSDKPty(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sandboxes and node")
	}
	step := runSDKScript(t, "pty.test.mjs")

	var create struct {
		First, Resized, Interrupted bool
		ExitCode                    *int
		Out                         string
	}
	step("create", &create)
	if !create.First || !create.Resized || !create.Interrupted {
		t.Errorf("pty.create: 6*7, envs, cwd, TERM and size %v; resize %v; ^C %v; terminal: %q", create.First, create.Resized, create.Interrupted, create.Out)
	}
	if create.ExitCode == nil || *create.ExitCode != 3 {
		t.Errorf("pty exit 3: exit code %v, want 3", create.ExitCode)
	}

	var ck struct {
		SeenFirst, SeenSecond, Killed, KilledAgain bool
		Ended                                      any
	}
	step("connectAndKill", &ck)
	if !ck.SeenFirst || !ck.SeenSecond {
		t.Errorf("pty.connect: output on the first handle %v, on the connected one %v", ck.SeenFirst, ck.SeenSecond)
	}
	if !ck.Killed || ck.KilledAgain {
		t.Errorf("pty.kill = %v then %v, want true then false", ck.Killed, ck.KilledAgain)
	}
	if n, ok := ck.Ended.(float64); ok && n == 0 {
		t.Errorf("killed pty ended with exit code 0")
	}
}
