// The memory section: what a sandbox costs in memory, idle and lean.

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/local"
)

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
