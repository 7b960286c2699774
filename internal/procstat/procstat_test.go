package procstat

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

func TestReadSelf(t *testing.T) {
	st, ok := Read(os.Getpid())
	if !ok || st.State == 0 || st.PPid != os.Getppid() || st.StartTime == 0 {
		t.Fatalf("Read(self) = %+v, %v", st, ok)
	}
	if _, ok := Read(1 << 30); ok {
		t.Error("a pid that can't exist was read")
	}
}

// TestEnded: a running process has not ended, for its own start time or
// none; with another start time (its pid reused) or once it is a zombie, it
// has; a pid that can't exist has.
func TestEnded(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	st, ok := Read(pid)
	if !ok {
		t.Fatal("cannot read the child's stat")
	}
	if Ended(pid, st.StartTime) || Ended(pid, 0) {
		t.Fatal("a running process counts as ended")
	}
	if !Ended(pid, st.StartTime+1) {
		t.Error("another start time (a reused pid) does not count as ended")
	}
	if !Ended(1<<30, 0) {
		t.Error("a pid that can't exist does not count as ended")
	}
	_ = cmd.Process.Kill()
	// Not reaped yet: a zombie, which has ended.
	deadline := time.Now().Add(10 * time.Second)
	for !Ended(pid, st.StartTime) {
		if time.Now().After(deadline) {
			t.Fatal("a killed, unreaped child does not count as ended")
		}
		time.Sleep(time.Millisecond)
	}
	if s, ok := Read(pid); !ok || s.State != 'Z' {
		t.Fatalf("the killed child is %+v (read %v), want a zombie", s, ok)
	}
	_ = cmd.Wait()
}
