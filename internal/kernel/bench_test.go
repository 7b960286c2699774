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

// BenchmarkRoundTripLongSession: "x + 2" on a kernel that has already run
// 5,000 cells since an error (which loads linecache, where tracebacks and
// inspect find cells' sources): a cell must not cost more because many
// came before it (before, each one registered every
// earlier cell's source again: ~0.5 ms a cell by the 5,000th).
func BenchmarkRoundTripLongSession(b *testing.B) {
	s := newTestSession(b)
	exec1(b, s, "1/0")
	exec1(b, s, "x = 40")
	for range 5000 {
		if _, err := s.Execute(context.Background(), Request{Code: "x + 2"}, nil); err != nil {
			b.Fatal(err)
		}
	}
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

// Languages other than Python: first result (new session → first main
// result) and warm round trip, against each language's own one-shot peer
// (node -e / bash -c / Rscript -e / jshell) in the same run; the workloads
// are BenchLanguages, which make bench's languages section runs too:
//
//	go test ./internal/kernel -run - -bench 'Language|Peer' -benchtime 20x
func BenchmarkLanguageFirstResult(b *testing.B) {
	for _, l := range BenchLanguages {
		b.Run(l.Lang, func(b *testing.B) {
			needInterpreter(b, l.Lang)
			dir := scriptDir(b)
			for b.Loop() {
				s := NewSession(Options{Python: testPython, ScriptDir: dir, Language: l.Lang})
				got := false
				if _, err := s.Execute(context.Background(), Request{Code: l.Cell}, func(e Event) {
					got = got || e.Type == EventError || e.IsMainResult || e.Type == EventStdout
				}); err != nil || !got {
					b.Fatal(err, got)
				}
				s.Close()
			}
		})
	}
}

func BenchmarkLanguageRoundTrip(b *testing.B) {
	for _, l := range BenchLanguages {
		b.Run(l.Lang, func(b *testing.B) {
			needInterpreter(b, l.Lang)
			s := newTestSession(b, func(o *Options) { o.Language = l.Lang })
			exec1(b, s, l.Setup)
			for b.Loop() {
				if _, err := s.Execute(context.Background(), Request{Code: l.Cell}, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkPeer(b *testing.B) {
	for _, l := range BenchLanguages {
		b.Run(l.Lang+"/"+l.Peer, func(b *testing.B) {
			if _, err := exec.LookPath(l.Peer); err != nil {
				b.Skip(err)
			}
			args, err := l.PeerArgs(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if err := exec.Command(l.Peer, args...).Run(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPrintLines: 2000 flushed prints in one cell. With a child process
// alive (ChildAlive) every Python-level write is a sync point, so a child's
// output on the other stream stays in order (see py/protocol.py, Ordering).
func BenchmarkPrintLines(b *testing.B) {
	for _, alive := range []bool{false, true} {
		name := "NoChild"
		if alive {
			name = "ChildAlive"
		}
		b.Run(name, func(b *testing.B) {
			s := newTestSession(b)
			if alive {
				exec1(b, s, "import subprocess; _p = subprocess.Popen(['sleep', '600'])")
				b.Cleanup(func() { exec1(b, s, "_p.kill(); _p.wait()") })
			}
			for b.Loop() {
				if _, err := s.Execute(context.Background(), Request{Code: "for i in range(2000): print(i, flush=True)"}, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
