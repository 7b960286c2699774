package kernel

import (
	"context"
	"os"
	"os/exec"
	"testing"
)

// BenchmarkPythonPass is the floor: starting the interpreter and exiting.
func BenchmarkPythonPass(b *testing.B) {
	for b.Loop() {
		if err := exec.Command(testPython, "-c", "pass").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFirstResult: new Session → first result of "1 + 1" (process start,
// kernel import, one cell), then Close.
func BenchmarkFirstResult(b *testing.B) {
	dir := scriptDir(b)
	for b.Loop() {
		s := NewSession(Options{Python: testPython, ScriptDir: benchDir(dir)})
		got := false
		if _, err := s.Execute(context.Background(), Request{Code: "1 + 1"}, func(e Event) { got = got || e.IsMainResult }); err != nil || !got {
			b.Fatal(err, got)
		}
		s.Close()
	}
}

// BenchmarkRoundTrip: one "x + 2" cell on a warm kernel.
func BenchmarkRoundTrip(b *testing.B) {
	s := newTestSession(b)
	exec1(b, s, "x = 40")
	for b.Loop() {
		if _, err := s.Execute(context.Background(), Request{Code: "x + 2"}, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// benchDir lets KERNEL_BENCH_NOCACHE=1 measure the -c fallback (no bytecode cache).
func benchDir(dir string) string {
	if os.Getenv("KERNEL_BENCH_NOCACHE") != "" {
		return "/proc/nonexistent"
	}
	return dir
}
