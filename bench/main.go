// Command bench measures code-sandboxes against its peers in one run and
// writes BENCHMARKS.md. Ratios, not absolute times, are the point: every
// number in a table was measured on the same machine in the same run, ours
// interleaved with the peers'.
//
//	go run ./bench -n 20 -rtt 200 -idle 20 -scale 300 -o BENCHMARKS.md
//	go run ./bench -only local,pool,plots   # some sections (the report has only those)
//	go run ./bench -trace 20                # the cold start step by step
//	go run ./bench -ab /tmp/main-sb,/tmp/new-sb -n 30  # two sandbox binaries' cold starts, pair by pair
//	go run ./bench -ab /tmp/main-sb,/tmp/new-sb -ab-rtt -rtt 4000  # their warm round trips, block by block
//
// A section is a func(ctx, *strings.Builder) in its own file, listed once in
// main's sections; it records distributions for the plots in samples.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	_ "github.com/code-sandboxes/code-sandboxes/docker"
	"github.com/code-sandboxes/code-sandboxes/internal/client"
	"github.com/code-sandboxes/code-sandboxes/internal/isolate"
	"github.com/code-sandboxes/code-sandboxes/internal/local"
	_ "github.com/code-sandboxes/code-sandboxes/kubernetes"
)

var (
	nCold  = flag.Int("n", 20, "cold starts per measurement")
	nRTT   = flag.Int("rtt", 200, "round trips of x + 2")
	nIdle  = flag.Int("idle", 20, "sandboxes for the idle-memory measurement")
	nScale = flag.Int("scale", 1000, "sandboxes for the scale measurement (the issue's target: 1,000 alive)")
	out    = flag.String("o", "BENCHMARKS.md", "where to write the report")
	python = flag.String("python", "/usr/bin/python3", "python interpreter")
	only   = flag.String("only", "", "run only these sections (comma-separated: kernel, languages, local, pool, serve, codemode, memory, files, variants, templates, scale, network, gvisor, pause, plots)")
)

type stats struct {
	p50, p99, max, mean float64
	n                   int
}

// tail is the p99 with 100 samples or more, else the max (a "p99" of 20
// samples is just their largest but one).
func (s stats) tail() float64 {
	if s.n < 100 {
		return s.max
	}
	return s.p99
}

func (s stats) tailName() string { return tailName(s.n) }

func tailName(n int) string {
	if n < 100 {
		return "max"
	}
	return "p99"
}

func summarize(ms []float64) stats {
	if len(ms) == 0 {
		return stats{}
	}
	s := append([]float64(nil), ms...)
	sort.Float64s(s)
	sum := 0.0
	for _, v := range s {
		sum += v
	}
	pct := func(p float64) float64 { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return stats{p50: pct(0.5), p99: pct(0.99), max: s[len(s)-1], mean: sum / float64(len(s)), n: len(s)}
}

func timeCmd(n int, name string, args ...string) ([]float64, error) {
	var ms []float64
	for i := 0; i < n; i++ {
		t := time.Now()
		cmd := exec.Command(name, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("%s: %v: %s", name, err, stderr.String())
		}
		ms = append(ms, float64(time.Since(t).Microseconds())/1000)
	}
	return ms, nil
}

func since(t time.Time) float64 { return float64(time.Since(t).Microseconds()) / 1000 }

func main() {
	flag.Parse()
	ctx := context.Background()
	var rep strings.Builder
	codeModeOnly(ctx) // with -codemode-only: prints the section and exits
	abOnly(ctx)       // with -ab: compares two sandbox binaries and exits
	if *traceN > 0 {
		check(traceColdStarts(ctx, os.Stdout, *traceN))
		return
	}
	if *onlyPool {
		poolBench(ctx, &rep)
		fmt.Print(rep.String())
		return
	}
	onlyTemplateBench(ctx, &rep) // -only-templates: this section alone, then exit
	if *onlyServe {
		rt, _ := os.MkdirTemp("", "cs-bench-")
		defer os.RemoveAll(rt)
		serveBench(ctx, &rep, sandboxes.Config{Options: local.Options{RuntimeDir: rt}})
		fmt.Print(rep.String())
		return
	}
	if *onlyNetwork {
		netBench(ctx, &rep)
		check(os.WriteFile(*out, []byte(rep.String()), 0o644))
		fmt.Print(rep.String())
		return
	}
	if *onlyEnv {
		// The environment, docker and kubernetes sections alone (a shorter
		// run; the report holds only them).
		kubeBench(ctx, &rep, envBench(ctx, &rep))
		check(os.WriteFile(*out, []byte(rep.String()), 0o644))
		fmt.Print(rep.String())
		return
	}

	before := measureMachine()
	started := time.Now()
	rt, _ := os.MkdirTemp("", "cs-bench-")
	defer os.RemoveAll(rt)
	cfg := sandboxes.Config{Options: local.Options{RuntimeDir: rt}}

	// The sections, in order; each writes its own part of the report. A new
	// section is a func(ctx, *strings.Builder) in its own file and one line
	// here; -only runs some of them (the report then holds only those).
	type section struct {
		name string
		run  func(context.Context, *strings.Builder)
	}
	sections := []section{
		{"kernel", kernelBench},
		{"languages", languagesBench},
		{"local", localBench},
		{"pool", poolBench},
		{"serve", func(ctx context.Context, r *strings.Builder) { serveBench(ctx, r, cfg) }},
		{"codemode", func(ctx context.Context, r *strings.Builder) { codeModeBench(ctx, r, cfg) }},
		{"memory", memoryBench},
		// Scale before files, variants and templates: a thousand sandboxes
		// need ~14 GiB, and once free memory runs out every create pays the
		// kernel's reclaim. Those sections fill the page cache (the 2 GiB
		// file written and read back, images, template rootfs), which
		// would put the reclaim (and its slow creates) in the scale run's
		// last tenths for reasons of the bench's order, not of the sandboxes.
		{"scale", scaleBench},
		{"files", filesBench},
		{"variants", func(ctx context.Context, r *strings.Builder) { kubeBench(ctx, r, envBench(ctx, r)) }},
		{"templates", templateBench},
		{"network", netBench},
		{"gvisor", gvisorBench},
		{"pause", pauseBench},
		{"plots", plotsSection},
	}
	want := map[string]bool{}
	for _, n := range strings.Split(*only, ",") {
		if n = strings.TrimSpace(n); n != "" {
			want[n] = true
		}
	}
	for n := range want {
		if !slices.ContainsFunc(sections, func(s section) bool { return s.name == n }) {
			check(fmt.Errorf("-only: unknown section %q", n))
		}
	}
	var body strings.Builder
	for _, s := range sections {
		if len(want) == 0 || want[s.name] {
			s.run(ctx, &body)
		}
	}

	after := measureMachine()
	host, _ := os.Hostname()
	fmt.Fprintf(&rep, "# Benchmarks\n\nMeasured by `make bench` (`go run ./bench`, see `bench/main.go`) on %s, %s UTC, in one run of %.0f s. ", host, started.UTC().Format("2006-01-02 15:04"), time.Since(started).Seconds())
	rep.WriteString("Every number in a table comes from the same run, peers measured beside ours (interleaved: ours, peer, ours, peer); the machines are shared and noisy, so read the ratios. Tails are p99 where a row has 100 samples or more, else the max.\n\n")
	writeMachine(&rep, before, after)
	rep.WriteString(body.String())
	fmt.Fprintf(&rep, "Reproduce: `make bench` (defaults: `-n %d -rtt %d -idle %d -scale %d`; `go run ./bench -scale 1000` for the issue's target).\n", *nCold, *nRTT, *nIdle, *nScale)
	check(os.WriteFile(*out, []byte(rep.String()), 0o644))
	fmt.Print(rep.String())
	if leanDir != "" {
		os.RemoveAll(leanDir)
	}
}

// kernelBench: python3 -c pass against the agent's new context → first
// result (no isolation), interleaved, and the round trip of x + 2, against
// a Jupyter kernel doing the same.
func kernelBench(ctx context.Context, rep *strings.Builder) {
	agentBin := buildAgent()
	var pyPass, firsts, rtts []float64
	for i := 0; i < *nCold; i++ {
		p, err := timeCmd(1, *python, "-c", "pass")
		check(err)
		pyPass = append(pyPass, p...)
		f, r := agentKernel(ctx, agentBin, i == 0)
		firsts = append(firsts, f)
		if i == 0 {
			rtts = r
		}
	}
	jup := jupyter()
	pp, ff, rr := summarize(pyPass), summarize(firsts), summarize(rtts)
	js, jr := jup.start, summarize(jup.rtt)
	rep.WriteString("## Kernel (issue 2)\n\n")
	rep.WriteString("Start a new context in a running agent (its default kernel warm, so the kernel's bytecode is cached) and get its first result (`1 + 1`), and the round trip of `x + 2`, through the agent over its unix socket (no isolation; executions over the lean connection our Go client uses, `/x/exec`), against a Jupyter kernel (`jupyter_client` + `ipykernel`) doing the same.\n\n")
	fmt.Fprintf(rep, "| measurement | ours p50 | ours %s | peer | peer p50 | ratio (ours/peer) |\n|---|---|---|---|---|---|\n", ff.tailName())
	fmt.Fprintf(rep, "| new context → first result | %.1f ms | %.1f ms | `python3 -c pass` | %.1f ms | %.2f× (target ≤ 1.5×) |\n", ff.p50, ff.tail(), pp.p50, ff.p50/pp.p50)
	fmt.Fprintf(rep, "| new context → first result | %.1f ms | %.1f ms | Jupyter kernel start → first result | %.1f ms | %.3f× |\n", ff.p50, ff.tail(), js, ff.p50/js)
	fmt.Fprintf(rep, "| round trip `x + 2` (%d) | %.2f ms | %.2f ms (%s) | Jupyter round trip | %.2f ms (%s %.2f) | %.3f× (target ≤ 0.1×) |\n\n", len(rtts), rr.p50, rr.tail(), rr.tailName(), jr.p50, jr.tailName(), jr.tail(), rr.p50/jr.p50)
	samples["python3 -c pass"] = pyPass
}

// localBench: cold Create → first result of 1 + 1, and Create alone,
// against bwrap starting python3 -c pass, interleaved.
func localBench(ctx context.Context, rep *strings.Builder) {
	rt, _ := os.MkdirTemp("", "cs-bench-")
	defer os.RemoveAll(rt)
	cfg := sandboxes.Config{Options: local.Options{RuntimeDir: rt}}
	bwrapArgs := []string{"--ro-bind", "/usr", "/usr", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
		"--symlink", "usr/bin", "/bin", "--ro-bind", "/etc", "/etc", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
		"--unshare-all", "--die-with-parent", "--uid", "1000", "--gid", "100", *python, "-c", "pass"}
	var cold, coldLean, coldNoRoot, coldNoSpare, createOnly, bw []float64
	var bwErr error
	lean, leanErr := leanBinary()
	coldOnce := func() float64 { return firstResult(ctx, cfg, "cold create") }
	// Without the root user a root caller's sandbox otherwise has (its
	// broker is one process and two runs of the binary per start): only
	// as root does the default have one.
	noRoot := cfg
	noRoot.Options = local.Options{RuntimeDir: rt, NoRootUser: true}
	withNoRoot := os.Geteuid() == 0
	steps := []func(){
		func() { withSandboxBinary("", func() { cold = append(cold, coldOnce()) }) },
		func() {
			if leanErr == nil {
				withSandboxBinary(lean, func() { coldLean = append(coldLean, coldOnce()) })
			}
		},
		func() {
			// A process's first Create, or any with spares off: its
			// supervisor starts at its Create (internal/local/spare.go).
			if leanErr == nil {
				os.Setenv(local.SpareSupervisorEnv, "0")
				withSandboxBinary(lean, func() { coldNoSpare = append(coldNoSpare, coldOnce()) })
				os.Unsetenv(local.SpareSupervisorEnv)
			}
		},
		func() {
			if leanErr == nil && withNoRoot {
				withSandboxBinary(lean, func() { coldNoRoot = append(coldNoRoot, firstResult(ctx, noRoot, "cold create, no root user")) })
			}
		},
		func() {
			if bwErr == nil {
				var b []float64
				if b, bwErr = timeCmd(1, "bwrap", bwrapArgs...); bwErr == nil {
					bw = append(bw, b...)
				}
			}
		},
		func() {
			t := time.Now()
			sb, err := sandboxes.Create(ctx, cfg)
			check(err)
			createOnly = append(createOnly, since(t))
			check(sb.Close())
			local.WaitSpares()
		},
	}
	for i := 0; i < *nCold; i++ {
		// The order turns each round: what one measurement leaves behind
		// (a sandbox's processes exiting, freed memory, the page cache
		// of the binary that links every variant) lands on each of the
		// others as often, not always on the one after it.
		for j := range steps {
			steps[(i+j)%len(steps)]()
		}
	}
	cs, co, bs := summarize(cold), summarize(createOnly), summarize(bw)
	rep.WriteString("## Local sandboxes (issue 3)\n\n")
	fmt.Fprintf(rep, "%d each, interleaved: cold Create → first result (sandbox processes: this benchmark's binary re-executed, then `cmd/code-sandboxes-sandbox` named in `CODE_SANDBOXES_SANDBOX_BINARY`, with `cmd/code-sandboxes-init` beside it for each sandbox's first stage), the peer, Create alone.\n\n", *nCold)
	fmt.Fprintf(rep, "| measurement | p50 | %s | ratio to bwrap p50 |\n|---|---|---|---|\n", cs.tailName())
	if bwErr == nil {
		fmt.Fprintf(rep, "| `bwrap --unshare-all … python3 -c pass` (peer) | %.1f ms | %.1f ms | 1× |\n", bs.p50, bs.tail())
	} else {
		fmt.Fprintf(rep, "| bwrap baseline | not measured: %v | | |\n", bwErr)
		bs.p50 = 0
	}
	ratio := func(v float64) string {
		if bs.p50 == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f×", v/bs.p50)
	}
	fmt.Fprintf(rep, "| `Create` (sandbox answers) | %.1f ms | %.1f ms | %s |\n", co.p50, co.tail(), ratio(co.p50))
	fmt.Fprintf(rep, "| cold `Create` → first result of `1 + 1` (this binary, which links every variant) | %.1f ms | %.1f ms | %s (target ≤ 1.6×) |\n", cs.p50, cs.tail(), ratio(cs.p50))
	if leanErr == nil {
		cl := summarize(coldLean)
		fmt.Fprintf(rep, "| the same, sandbox processes from `cmd/code-sandboxes-sandbox` (stage 1 from `cmd/code-sandboxes-init`) | %.1f ms | %.1f ms | %s (target ≤ 1.6×) |\n", cl.p50, cl.tail(), ratio(cl.p50))
		samples["cold Create → first result (lean sandbox binary)"] = coldLean
		ns := summarize(coldNoSpare)
		fmt.Fprintf(rep, "| the same without a spare supervisor (a process's first `Create`, or `%s=0`; the rows above had one waiting, started %v after the Create before theirs) | %.1f ms | %.1f ms | %s |\n", local.SpareSupervisorEnv, local.SpareDelay, ns.p50, ns.tail(), ratio(ns.p50))
		if withNoRoot {
			nr := summarize(coldNoRoot)
			fmt.Fprintf(rep, "| the same without the root user (`local.Options.NoRootUser`: no sudo inside, no broker process) | %.1f ms | %.1f ms | %s |\n", nr.p50, nr.tail(), ratio(nr.p50))
		}
	} else {
		fmt.Fprintf(rep, "| the same, sandbox processes from `cmd/code-sandboxes-sandbox` | not measured: %v | | |\n", leanErr)
	}
	rep.WriteString("| `docker run` | see the docker variant's section below | | |\n")
	rep.WriteString("\n")
	samples["cold Create → first result"] = cold
	samples["Create (answers)"] = createOnly
	if bwErr == nil {
		samples["bwrap … python3 -c pass"] = bw
	}
}

// memoryBench: PSS per idle sandbox.
func memoryBench(ctx context.Context, rep *strings.Builder) {
	rt, _ := os.MkdirTemp("", "cs-bench-")
	defer os.RemoveAll(rt)
	cfg := sandboxes.Config{Options: local.Options{RuntimeDir: rt}}
	var sbs []*sandboxes.Sandbox
	for i := 0; i < *nIdle; i++ {
		sb, err := sandboxes.Create(ctx, cfg)
		check(err)
		sbs = append(sbs, sb)
	}
	memNoKernel, _ := idleMemory(rt)
	for _, sb := range sbs {
		_, err := sb.RunCode(ctx, "x = 1")
		check(err)
	}
	time.Sleep(500 * time.Millisecond)
	memKernel, parts := idleMemory(rt)
	for _, sb := range sbs {
		_ = sb.Close()
	}
	rep.WriteString("## Memory per idle sandbox\n\n")
	fmt.Fprintf(rep, "%d idle sandboxes of this benchmark's binary, then of a minimal program; proportional set size (PSS, shared pages split between sharers) of the supervisor, the agent and the kernel, from `/proc/<pid>/smaps_rollup`.\n\n", *nIdle)
	rep.WriteString("| state | PSS per sandbox | target |\n|---|---|---|\n")
	fmt.Fprintf(rep, "| created, no code run (shim + agent + the prewarmed default kernel) | %.1f MiB | |\n", memNoKernel/float64(*nIdle))
	fmt.Fprintf(rep, "| after one execution (shim + agent + python kernel) | %.1f MiB | ≤ 16 MiB |\n", memKernel/float64(*nIdle))
	names := make([]string, 0, len(parts))
	for n := range parts {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(rep, "| … of which `%s` | %.1f MiB | |\n", n, parts[n]/float64(*nIdle))
	}
	rep.WriteString(leanMemory(ctx))
	rep.WriteString(minimalMemory(ctx))
	rep.WriteString("\n")
}

// leanMemory measures the same for sandboxes of this binary whose
// processes run cmd/code-sandboxes-sandbox (CODE_SANDBOXES_SANDBOX_BINARY).
func leanMemory(ctx context.Context) string {
	lean, err := leanBinary()
	if err != nil {
		return fmt.Sprintf("| the same, sandbox processes from `cmd/code-sandboxes-sandbox` | not measured: %v | |\n", err)
	}
	var s string
	withSandboxBinary(lean, func() {
		rt, _ := os.MkdirTemp("", "cs-bench-")
		defer os.RemoveAll(rt)
		cfg := sandboxes.Config{Options: local.Options{RuntimeDir: rt}}
		var sbs []*sandboxes.Sandbox
		defer func() {
			for _, sb := range sbs {
				_ = sb.Close()
			}
		}()
		for i := 0; i < *nIdle; i++ {
			sb, err := sandboxes.Create(ctx, cfg)
			check(err)
			sbs = append(sbs, sb)
			_, err = sb.RunCode(ctx, "x = 1")
			check(err)
		}
		time.Sleep(500 * time.Millisecond)
		total, parts := idleMemory(rt)
		s = fmt.Sprintf("| the same, this binary with its sandboxes' processes from `cmd/code-sandboxes-sandbox` (`CODE_SANDBOXES_SANDBOX_BINARY`) | %.1f MiB | ≤ 16 MiB |\n", total/float64(*nIdle))
		s += partRows(parts)
	})
	return s
}

func partRows(parts map[string]float64) string {
	names := make([]string, 0, len(parts))
	for n := range parts {
		names = append(names, n)
	}
	sort.Strings(names)
	var s string
	for _, n := range names {
		s += fmt.Sprintf("| … of which `%s` | %.1f MiB | |\n", n, parts[n]/float64(*nIdle))
	}
	return s
}

// scaleBench: create time while N sandboxes are alive, then everything
// closed and the runtime directory checked empty.
func scaleBench(ctx context.Context, rep *strings.Builder) {
	// The sandboxes' processes from cmd/code-sandboxes-sandbox unless
	// -scale-self: this binary re-executed costs ~25 MiB per sandbox (see
	// the memory section), too much for a thousand on a 24 GiB machine.
	if !*scaleSelf {
		if lean, err := leanBinary(); err == nil {
			withSandboxBinary(lean, func() { scaleRun(ctx, rep, "`cmd/code-sandboxes-sandbox` (`CODE_SANDBOXES_SANDBOX_BINARY`)") })
			return
		} else {
			fmt.Fprintf(os.Stderr, "scale: %v; this binary runs the sandboxes' processes\n", err)
		}
	}
	scaleRun(ctx, rep, "this benchmark's binary re-executed")
}

var scaleSelf = flag.Bool("scale-self", false, "scale section: sandboxes' processes from this binary, not cmd/code-sandboxes-sandbox")

func scaleRun(ctx context.Context, rep *strings.Builder, procs string) {
	rt, _ := os.MkdirTemp("", "cs-bench-scale-")
	defer os.RemoveAll(rt)
	cfg := sandboxes.Config{Options: local.Options{RuntimeDir: rt}}
	rep.WriteString("## Scale\n\n")
	step := max(1, *nScale/10)
	// The control: after each create, a block of fresh memory touched by
	// this process and kept to the end, so that each row has the machine's
	// price of fresh memory at the same moments as the creates it shows.
	const controlBlock = 1 << 20
	var fresh freshMemory
	defer fresh.release()
	var control []float64
	var cerr error
	memStart, started := snapMemoryReturn(), time.Now()
	fmt.Fprintf(rep, "Create %d sandboxes (their processes: %s) and keep them; create time of each tenth (p50 over its %d), and the CPU each create cost: this process's and the new sandbox's processes' (on-CPU time of their threads when Create returned, from `/proc/PID/task/*/schedstat`), which the rest of the machine's load moves less than wall time (it still moves it: a busy host's caches and a VM's stolen cycles). The host's memory beside: once the sandboxes' own has eaten its free memory, the kernel reclaims page cache (pages scanned), and a create whose binaries' or Python's pages were evicted reads them again. This section runs before the files, variants and templates sections, so that the page cache it starts on is not already full of their files (the 2 GiB one among them): reclaim that early would be the bench's order, not the sandboxes'. Page faults per create (the host's, `pgfault` in `/proc/vmstat`, over the tenth) count the memory a create touches (the control's own left out): when they stay flat while CPU per create grows, each fault got dearer, not the work more (on a VM, a guest page the host has not backed, or took back, costs the host's fault inside the guest's page clearing). The control column measures exactly that, and nothing of ours: after each create (outside its timing), this process mapped %d MiB, touched it a page at a time (no huge pages) and kept it to the end; each row gives the p50 of its tenth's blocks, taken at the same moments as the creates beside it.\n\n| alive | create p50 | %s | CPU per create p50 | page faults per create | MemAvailable | pages scanned by reclaim | control: %d MiB of fresh memory touched, p50 |\n|---|---|---|---|---|---|---|---|\n", *nScale, procs, step, controlBlock>>20, tailName(step), controlBlock>>20)
	var alive []*sandboxes.Sandbox
	var window, cpuWindow, all []float64
	var firstP50, lastP50, firstCPU, lastCPU float64
	avail0, scanned, faults := hostMemory()
	availPeak := avail0
	for i := 1; i <= *nScale; i++ {
		self0 := selfCPU()
		t := time.Now()
		sb, err := sandboxes.Create(ctx, cfg)
		if err != nil {
			fmt.Fprintf(rep, "| %d | failed: %v | | | | | | |\n", i, err)
			break
		}
		ms := since(t)
		cpu := selfCPU() - self0 + sandboxCPU(local.SandboxDir(rt, sb.ID()))
		if cerr == nil {
			var c float64
			if c, cerr = fresh.touch(controlBlock); cerr == nil {
				control = append(control, c)
			}
		}
		window = append(window, ms)
		cpuWindow = append(cpuWindow, cpu)
		all = append(all, ms)
		alive = append(alive, sb)
		if i%step == 0 {
			w, c := summarize(window), summarize(cpuWindow)
			if firstP50 == 0 {
				firstP50, firstCPU = w.p50, c.p50
			}
			lastP50, lastCPU = w.p50, c.p50
			avail, sc, f := hostMemory()
			availPeak = avail
			ctl := "–"
			if i <= len(control) {
				ctl = fmt.Sprintf("%.3f ms", summarize(control[i-step:i]).p50)
			}
			// The control's own faults (a page each) are not the creates'.
			ctlFaults := int64(min(len(control), i)-min(len(control), i-step)) * int64(controlBlock/os.Getpagesize())
			fmt.Fprintf(rep, "| %d | %.1f ms | %.1f ms | %.1f ms | %d | %.1f GiB | %d | %s |\n", i, w.p50, w.tail(), c.p50, (f-faults-ctlFaults)/int64(step), float64(avail)/(1<<30), sc-scanned, ctl)
			scanned, faults = sc, f
			window, cpuWindow = nil, nil
		}
	}
	memPeak, createsMs := snapMemoryReturn(), since(started)
	threads, nprocs := sandboxThreads(rt)
	byRole := sandboxThreadsByRole(rt)
	hostThreads, selfThreads := hostTasks(), selfTasks()
	pidMax, _ := os.ReadFile("/proc/sys/kernel/pid_max")
	roomTasks, roomLimit, roomOK := isolate.TaskHeadroom()
	roomMem, roomMemLimit, roomMemOK := isolate.MemoryHeadroom()
	// What the sandboxes took: the control's blocks are held too.
	sandboxMem := avail0 - availPeak - int64(len(control))*controlBlock
	fresh.release()
	for _, sb := range alive {
		_ = sb.Close()
	}
	if len(alive) > 0 {
		fmt.Fprintf(rep, "\nAt the peak: %.1f threads and %.1f processes per sandbox (every task takes a pid: `kernel.pid_max` is %s here); %d threads on the host, %d of them this benchmark's. Every thread on the host lengthens each new sandbox's `pivot_root`: the kernel walks them all (`chroot_fs_refs`, about 0.1 µs each). Threads per sandbox by process: %s. MemAvailable fell by %.1f MiB per sandbox alive (the control's blocks left out).\n", float64(threads)/float64(len(alive)), float64(nprocs)/float64(len(alive)), strings.TrimSpace(string(pidMax)), hostThreads, selfThreads, byRole.format(len(alive)), float64(sandboxMem)/float64(len(alive))/(1<<20))
		perTasks := float64(threads) / float64(len(alive))
		perMem := float64(sandboxMem) / float64(len(alive))
		if roomOK && roomMemOK && perTasks > 0 && perMem > 0 {
			// Which limit a caller would run into next, here: Create
			// refuses with ErrNoRoom on the first of them.
			fmt.Fprintf(rep, "Room left at the peak, before Create refuses (`ErrNoRoom`): %d tasks under `%s`, about %.0f more sandboxes at %.1f tasks each; %.1f GiB under %s, about %.0f more at %.1f MiB each.\n",
				roomTasks, roomLimit, float64(roomTasks)/perTasks, perTasks, float64(roomMem)/(1<<30), roomMemLimit, float64(roomMem)/perMem, perMem/(1<<20))
		}
	}
	ents, _ := os.ReadDir(rt)
	fmt.Fprintf(rep, "\n%d alive at the peak; the last tenth's create p50 is %.2f× the first's (goal ≤ 1.5×), its CPU per create %.2f× the first's; after closing them all, %d entries were left in the runtime directory.", len(alive), lastP50/max(firstP50, 1e-9), lastCPU/max(firstCPU, 1e-9), len(ents))
	if cerr != nil {
		fmt.Fprintf(rep, " The control stopped after %d blocks: %v.", len(control), cerr)
	}
	if n := len(control); n >= 10 {
		first, last := summarize(control[:n/10]).p50, summarize(control[n-n/10:]).p50
		fmt.Fprintf(rep, " The control's last tenth took %.2f× its first's per %d MiB of fresh memory (the machine alone, at the same moments).", last/max(first, 1e-9), controlBlock>>20)
	}
	if d := memStart.describe(memPeak, createsMs); d != "" {
		rep.WriteString(" " + d)
	}
	rep.WriteString("\n\n")
	scaleSamples = all
}

// runCodeRTT creates one sandbox and times RunCode("x + 2") round trips.
func runCodeRTT(ctx context.Context, cfg sandboxes.Config) []float64 {
	sb := rttSandbox(ctx, cfg)
	defer sb.Close()
	return rttBlock(ctx, sb, *nRTT)
}

// rttSandbox creates a sandbox with x = 40, for timeRunCode.
func rttSandbox(ctx context.Context, cfg sandboxes.Config) *sandboxes.Sandbox {
	sb, err := sandboxes.Create(ctx, cfg)
	check(err)
	_, err = sb.RunCode(ctx, "x = 40")
	check(err)
	return sb
}

// rttBlock times n round trips of x + 2 on sb, one right after the other.
func rttBlock(ctx context.Context, sb *sandboxes.Sandbox, n int) []float64 {
	ms := make([]float64, 0, n)
	for range n {
		ms = append(ms, timeRunCode(ctx, sb))
	}
	return ms
}

// timeRunCode times one RunCode("x + 2") on a sandbox rttSandbox made.
func timeRunCode(ctx context.Context, sb *sandboxes.Sandbox) float64 {
	t := time.Now()
	ex, err := sb.RunCode(ctx, "x + 2")
	check(err)
	if ex.Text() != "42" {
		check(fmt.Errorf("round trip: got %q", ex.Text()))
	}
	return since(t)
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func buildAgent() string {
	dir, _ := os.MkdirTemp("", "cs-agent-")
	bin := filepath.Join(dir, "code-sandboxes-agent")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/code-sandboxes-agent")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		check(fmt.Errorf("build agent: %v: %s", err, out))
	}
	return bin
}

// agentKernel starts an agent, measures new context → first result, and
// (when rtt) the round trips of x + 2.
func agentKernel(ctx context.Context, bin string, rtt bool) (float64, []float64) {
	dir, _ := os.MkdirTemp("", "cs-agent-run-")
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "s")
	cmd := exec.Command(bin, "--listen", "unix:"+sock, "--workdir", dir, "--python", *python)
	cmd.Env = []string{"HOME=" + dir, "PATH=/usr/bin:/bin"}
	check(cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	// The Go API's path: executions over the lean connection (/x/exec).
	c := client.New(client.Options{EnvdURL: "http://sandbox", HTTPClient: client.UnixHTTPClient(sock), Dial: client.UnixDial(sock)})
	for c.Health(ctx) != nil {
		time.Sleep(2 * time.Millisecond)
	}
	// A new context in a running agent: its default kernel started (and
	// with it the kernel's bytecode cached in this fresh HOME) before the
	// clock starts. Otherwise both kernels start at once with the agent
	// and compile the kernel's source: a cold host's first start, which
	// the local section measures whole.
	check(c.Warm(ctx))
	t := time.Now()
	cc, err := c.CreateContext(ctx, "python", "")
	check(err)
	text := ""
	check(c.Execute(ctx, client.ExecuteRequest{Code: "1 + 1", ContextID: cc.ID}, func(l client.Line) {
		if l.Type == "result" {
			_ = json.Unmarshal(l.Data["text"], &text)
		}
	}))
	first := since(t)
	if text != "2" {
		check(fmt.Errorf("agent first result %q", text))
	}
	if !rtt {
		return first, nil
	}
	check(c.Execute(ctx, client.ExecuteRequest{Code: "x = 40", ContextID: cc.ID}, func(client.Line) {}))
	var rtts []float64
	for i := 0; i < *nRTT; i++ {
		t := time.Now()
		check(c.Execute(ctx, client.ExecuteRequest{Code: "x + 2", ContextID: cc.ID}, func(client.Line) {}))
		rtts = append(rtts, since(t))
	}
	return first, rtts
}

type jupyterResult struct {
	start float64
	rtt   []float64
}

func jupyter() jupyterResult {
	cmd := exec.Command(*python, "bench/jupyter_baseline.py", strconv.Itoa(*nRTT))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		check(fmt.Errorf("jupyter baseline: %v: %s", err, stderr.String()))
	}
	var r struct {
		Start float64   `json:"start_first_result_ms"`
		RTT   []float64 `json:"rtt_ms"`
	}
	check(json.Unmarshal(b, &r))
	return jupyterResult{start: r.Start, rtt: r.RTT}
}

// minimalMemory measures the same for sandboxes of bench/idleprobe, a
// program that imports only the root package: the supervisor and the agent
// are the caller's binary re-executed, and this benchmark's own imports
// every variant (the Kubernetes client's package data is in each of its
// processes).
func minimalMemory(ctx context.Context) string {
	dir, _ := os.MkdirTemp("", "cs-idleprobe-")
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "idleprobe")
	if out, err := exec.Command("go", "build", "-o", bin, "./bench/idleprobe").CombinedOutput(); err != nil {
		return fmt.Sprintf("| a program importing only the root package | not measured: %v: %s | |\n", err, out)
	}
	rt := filepath.Join(dir, "rt")
	cmd := exec.CommandContext(ctx, bin, rt, strconv.Itoa(*nIdle))
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	check(cmd.Start())
	defer func() { stdin.Close(); _ = cmd.Wait() }()
	line := make([]byte, 6)
	if _, err := io.ReadFull(stdout, line); err != nil || string(line) != "ready\n" {
		return "| a program importing only the root package | not measured: the probe failed | |\n"
	}
	time.Sleep(500 * time.Millisecond)
	total, parts := idleMemory(rt)
	s := fmt.Sprintf("| the same from a program importing only the root package (bench/idleprobe) | %.1f MiB | ≤ 16 MiB |\n", total/float64(*nIdle))
	names := make([]string, 0, len(parts))
	for n := range parts {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s += fmt.Sprintf("| … of which `%s` | %.1f MiB | |\n", n, parts[n]/float64(*nIdle))
	}
	return s
}

// idleMemory sums the PSS (MiB) of every process of every sandbox in rt: the
// shim (from its record), and everything in its process tree; and by part
// (the process's argv[0]: shim, agent, kernel).
func idleMemory(rt string) (float64, map[string]float64) {
	total := 0.0
	parts := map[string]float64{}
	for _, pid := range sandboxPids(rt) {
		v := pss(pid) / 1024
		total += v
		c, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		name, _, _ := strings.Cut(string(c), "\x00")
		parts[filepath.Base(name)] += v
	}
	return total, parts
}

// sandboxThreads counts the threads and processes of every sandbox in rt.
func sandboxThreads(rt string) (threads, procs int) {
	for _, pid := range sandboxPids(rt) {
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		threads += len(tasks)
		procs++
	}
	return threads, procs
}

// roleThreads counts the threads of every sandbox's processes by what
// each process is (its argv[0]: the supervisor, the agent, the root user's
// broker; anything else, the Python kernel, by its name).
type roleThreads map[string]int

func sandboxThreadsByRole(rt string) roleThreads {
	r := roleThreads{}
	for _, pid := range sandboxPids(rt) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		name := filepath.Base(strings.SplitN(string(b), "\x00", 2)[0])
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		r[name] += len(tasks)
	}
	return r
}

// format lists the roles, most threads first, per sandbox of n.
func (r roleThreads) format(n int) string {
	names := make([]string, 0, len(r))
	for k := range r {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool {
		return r[names[i]] > r[names[j]] || r[names[i]] == r[names[j]] && names[i] < names[j]
	})
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("`%s` %.1f", k, float64(r[k])/float64(n))
	}
	return strings.Join(parts, ", ")
}

// sandboxPids lists the processes of every sandbox in rt: each shim (from
// its record) and its process tree.
func sandboxPids(rt string) []int {
	var pids []int
	ents, _ := os.ReadDir(rt)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(rt, e.Name(), "state.json"))
		if err != nil {
			continue
		}
		var r struct {
			ShimPid int `json:"shim_pid"`
		}
		_ = json.Unmarshal(b, &r)
		pids = append(pids, tree(r.ShimPid)...)
	}
	return pids
}

// hostMemory returns MemAvailable (bytes), the pages the kernel's reclaim
// has scanned since boot (the pgscan_* counters) and the page faults the
// host has taken since boot (pgfault).
func hostMemory() (avail, scanned, faults int64) {
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for l := range strings.Lines(string(b)) {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemAvailable:" {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				avail = kb << 10
			}
		}
	}
	if b, err := os.ReadFile("/proc/vmstat"); err == nil {
		for l := range strings.Lines(string(b)) {
			f := strings.Fields(l)
			if len(f) != 2 {
				continue
			}
			n, _ := strconv.ParseInt(f[1], 10, 64)
			switch {
			case strings.HasPrefix(f[0], "pgscan_"):
				scanned += n
			case f[0] == "pgfault":
				faults = n
			}
		}
	}
	return avail, scanned, faults
}

// selfCPU is this process's user and system CPU time so far, in ms.
func selfCPU() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e6
}

// sandboxCPU is the on-CPU time (ms) of the threads of the sandbox whose
// directory is dir: its supervisor and every process under it.
func sandboxCPU(dir string) float64 {
	ms, _ := sandboxSched(dir)
	return ms
}

// sandboxSched is sandboxCPU and how many times those threads were
// scheduled in: wake-ups, which a busy VM's stolen time doesn't move.
func sandboxSched(dir string) (ms, runs float64) {
	b, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		return 0, 0
	}
	var r struct {
		ShimPid int `json:"shim_pid"`
	}
	if json.Unmarshal(b, &r) != nil || r.ShimPid <= 0 {
		return 0, 0
	}
	for _, pid := range tree(r.ShimPid) {
		m, n := procSched(pid)
		ms += m
		runs += n
	}
	return ms, runs
}

// procSched is the on-CPU time (ms) of a process's threads so far and how
// many times they were scheduled in (a kernel thread: just its own).
func procSched(pid int) (ms, runs float64) {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	ns := 0.0
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		// schedstat: ns on the CPU, ns waiting for it, times run.
		if f := strings.Fields(string(b)); len(f) > 2 {
			v, _ := strconv.ParseFloat(f[0], 64)
			n, _ := strconv.ParseFloat(f[2], 64)
			ns += v
			runs += n
		}
	}
	return ns / 1e6, runs
}

// hostTasks counts the threads of every process on the host.
func hostTasks() int {
	n := 0
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		if p.Name()[0] < '0' || p.Name()[0] > '9' {
			continue
		}
		tasks, _ := os.ReadDir("/proc/" + p.Name() + "/task")
		n += len(tasks)
	}
	return n
}

// selfTasks counts this process's threads.
func selfTasks() int {
	tasks, _ := os.ReadDir("/proc/self/task")
	return len(tasks)
}

func tree(root int) []int {
	out := []int{root}
	for i := 0; i < len(out); i++ {
		// children is per thread: a Go parent forks from any of its threads.
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", out[i]))
		for _, t := range tasks {
			b, err := os.ReadFile(t)
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(b)) {
				if p, err := strconv.Atoi(f); err == nil {
					out = append(out, p)
				}
			}
		}
	}
	return out
}

// pss returns a process's proportional set size in KiB.
func pss(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "Pss:") {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[1], 64)
			return v
		}
	}
	return 0
}

// firstResult times Create → the result of 1 + 1 (ms) and closes the
// sandbox; what names the measurement in a failure.
func firstResult(ctx context.Context, cfg sandboxes.Config, what string) float64 {
	t := time.Now()
	sb, err := sandboxes.Create(ctx, cfg)
	check(err)
	ex, err := sb.RunCode(ctx, "1 + 1")
	check(err)
	if ex.Text() != "2" {
		check(fmt.Errorf("%s: got %q", what, ex.Text()))
	}
	ms := since(t)
	check(sb.Close())
	// A spare supervisor this Create had start (internal/local/spare.go)
	// starts outside the next measurement, which may be a peer's.
	local.WaitSpares()
	return ms
}
