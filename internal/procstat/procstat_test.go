package procstat

import (
	"os"
	"testing"
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
