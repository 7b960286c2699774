package main

// Pause and resume (issue 16), local with isolation gvisor: the time of a
// pause and of a resume for an idle sandbox and for one holding 500 MB,
// against a cold create that rebuilds the same state (re-running the
// cells), and the checkpoint's size on disk.

import (
	"context"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/local"
)

var (
	nPause    = flag.Int("pause", 5, "pause/resume cycles per pause measurement")
	onlyPause = flag.Bool("pause-only", false, "only the pause section, to stdout")
)

// -pause-only, as -gvisor-only (gvisor.go).
func init() {
	for _, a := range os.Args[1:] {
		if strings.HasPrefix(a, "-pause-only") || strings.HasPrefix(a, "--pause-only") {
			flag.Parse()
			if !*onlyPause {
				return
			}
			var rep strings.Builder
			pauseBench(context.Background(), &rep)
			fmt.Print(rep.String())
			os.Exit(0)
		}
	}
}

// pauseStates are the states measured: the cells that build them.
var pauseStates = []struct{ name, code string }{
	{"idle (x = 40)", "x = 40"},
	{"500 MB of random bytes", "import os\nb = bytearray(os.urandom(500 << 20))\nx = 40"},
}

func pauseBench(ctx context.Context, rep *strings.Builder) {
	rep.WriteString("## Pause and resume (issue 16)\n\n")
	if _, err := exec.LookPath("runsc"); err != nil || os.Geteuid() != 0 {
		rep.WriteString("Not measured: pause needs isolation gvisor on the local variant (root and runsc).\n\n")
		return
	}
	rt, err := os.MkdirTemp("", "cs-bench-pause-")
	check(err)
	defer os.RemoveAll(rt)
	state, err := os.MkdirTemp("/var/tmp", "cs-bench-state-") // on disk, as /var/lib would be
	check(err)
	defer os.RemoveAll(state)
	check(os.Setenv("CODE_SANDBOXES_STATE_DIR", state))
	defer os.Unsetenv("CODE_SANDBOXES_STATE_DIR")
	cfg := sandboxes.Config{Isolation: sandboxes.IsolationGVisor, Memory: 2 << 30, Options: local.Options{RuntimeDir: rt}}
	rep.WriteString("| state | pause p50 | resume p50 | checkpoint on disk | cold create + cells p50 |\n|---|---|---|---|---|\n")
	for _, st := range pauseStates {
		var pause, resume, cold []float64
		var size int64
		sb, err := sandboxes.Create(ctx, cfg)
		check(err)
		ex, err := sb.RunCode(ctx, st.code)
		check(err)
		if ex.Error != nil {
			check(fmt.Errorf("%s: %v", st.name, ex.Error))
		}
		for i := 0; i < *nPause; i++ {
			t := time.Now()
			check(sb.Pause(ctx))
			pause = append(pause, since(t))
			size = dirSize(filepath.Join(state, "paused"))
			t = time.Now()
			check(sb.Resume(ctx))
			ex, err := sb.RunCode(ctx, "x + 2")
			check(err)
			resume = append(resume, since(t))
			if ex.Text() != "42" {
				check(fmt.Errorf("%s: x + 2 after resume = %q", st.name, ex.Text()))
			}
		}
		_ = sb.Close()
		for i := 0; i < *nPause; i++ {
			t := time.Now()
			sb, err := sandboxes.Create(ctx, cfg)
			check(err)
			_, err = sb.RunCode(ctx, st.code)
			check(err)
			ex, err := sb.RunCode(ctx, "x + 2")
			check(err)
			cold = append(cold, since(t))
			_ = sb.Close()
			if ex.Text() != "42" {
				check(fmt.Errorf("%s: cold x + 2 = %q", st.name, ex.Text()))
			}
		}
		fmt.Fprintf(rep, "| %s | %.0f ms | %.0f ms | %.1f MB | %.0f ms |\n", st.name, summarize(pause).p50,
			summarize(resume).p50, float64(size)/(1<<20), summarize(cold).p50)
	}
	fmt.Fprintf(rep, "\nResume is timed up to the first answer of `x + 2`; %d cycles each (`-pause N`); the checkpoint in %s (a disk, as the default /var/lib/code-sandboxes).\n\n", *nPause, "/var/tmp")
}

func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}
