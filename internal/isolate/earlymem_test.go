//go:build linux

package isolate

import (
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// earlyMemProbe is what the early start runs in TestEarlyStartCantReachStage1:
// it tries to open stage 1's memory, and each of its threads', for writing,
// and says which it could. Its parent is stage 1 (pid 1 of the sandbox's pid
// namespace), which at that moment has hardened only the thread that forked
// it: the others still hold every capability in the sandbox's user
// namespace, and a write to the memory they share would be theirs.
const earlyMemProbe = `for m in /proc/$PPID/mem /proc/$PPID/task/*/mem; do
  if (exec 3<>"$m") 2>/dev/null; then echo "opened $m"; else echo "denied $m"; fi
done`

// earlyMemLoop tries what earlyMemProbe does, and the fd list and the
// environment, for 300 ms: through the end of stage 1 and the start of
// stage 2 (mode "early-mem-async", in place: the same process goes on).
const earlyMemLoop = `end=$(( $(date +%s%N) + 300000000 ))
while [ "$(date +%s%N)" -lt "$end" ]; do
  if (exec 3<>/proc/$PPID/mem) 2>/dev/null; then echo "opened /proc/$PPID/mem"; break; fi
  if ls /proc/$PPID/fd >/dev/null 2>&1; then echo "listed /proc/$PPID/fd"; break; fi
  if cat /proc/$PPID/environ >/dev/null 2>&1; then echo "read /proc/$PPID/environ"; break; fi
done
echo "probe done"`

// earlyProbe returns an early start that runs script with the test's
// stdout: mode "early-mem" waits for it, so stage 1 is still stage 1 while
// it tries; mode "early-mem-async" doesn't (childMain waits for it).
func earlyProbe(script string, wait bool) func() (string, []*os.File) {
	return func() (string, []*os.File) {
		cmd := exec.Command("/bin/sh", "-c", script)
		cmd.Stdout = os.Stdout
		cmd.Stderr = os.Stderr
		run := cmd.Start
		if wait {
			run = cmd.Run
		}
		if err := run(); err != nil {
			os.Stdout.WriteString("probe failed: " + err.Error() + "\n")
		}
		return "", nil
	}
}

// A process the early start starts is code of the sandbox's (the kernel;
// with an environment, its python is the environment's own): it must not
// reach stage 1, which still has threads with capabilities until its
// re-exec. It is the same user and stage 1's hardened thread (the one
// /proc/PID/mem checks against) has no capability more than it, so only
// stage 1 being not dumpable keeps it out.
func TestEarlyStartCantReachStage1(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
	}{
		{"re-exec", []string{ReexecEnv + "=1"}},
		{"in place", []string{ReexecEnv + "=0"}},
		{"root user", []string{ReexecEnv + "=1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := Spec{}
			if tc.name == "root user" {
				if os.Geteuid() != 0 {
					t.Skip("a root user in the sandbox needs a root caller")
				}
				spec.HostRootUID, spec.HostRootGID = RootModeHostUID-SandboxUID, RootModeHostGID-SandboxGID
			}
			p, out := startSandbox(t, spec, "early-mem", tc.env...)
			b, _ := io.ReadAll(out)
			p.Wait()
			got := string(b)
			if !strings.Contains(got, "denied /proc/1/mem") || strings.Contains(got, "opened") || strings.Contains(got, "probe failed") {
				t.Fatalf("the early start's process reached stage 1:\n%s", got)
			}
			t.Logf("%s", got)
		})
	}
	// Nor later, while stage 2 goes on: in place no exec follows; the
	// re-exec makes stage 2 from an execute-only copy of the binary
	// (Spec.ExecOnlyDir, which startSandbox sets), not dumpable from its
	// first instruction.
	for _, tc := range []struct{ name, reexec string }{{"in place, later", "0"}, {"re-exec, later", "1"}} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.reexec == "0" && !wantInPlaceHere() {
				t.Skip("hardening in place needs a runtime that can change every thread (built without cgo)")
			}
			p, out := startSandbox(t, Spec{}, "early-mem-async", ReexecEnv+"="+tc.reexec)
			b, _ := io.ReadAll(out)
			p.Wait()
			got := string(b)
			if !strings.Contains(got, "probe done") || strings.Contains(got, "opened") || strings.Contains(got, "listed") || strings.Contains(got, "read ") {
				t.Fatalf("the early start's process reached stage 2:\n%s", got)
			}
		})
	}
}
