// The scale section: many sandboxes at once on one host.

package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/isolate"
	"github.com/code-sandboxes/code-sandboxes/internal/local"
)

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
