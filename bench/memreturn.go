package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// What the machine does with memory behind the sandboxes' back, read from
// sysfs: on a VM, free page reporting hands freed guest memory back to the
// host (so the next touch of it costs the host's fault inside the guest's
// page clearing), and DAMON's kdamonds sample pages through reverse maps
// (a walk over every process mapping the page: our sandboxes all map the
// same binaries) and page cold ones out. Both make a create slower the more
// sandboxes are alive without any of our code doing more; the scale
// section reports them so its numbers can be read.

// Variables, so that a test can point them at a tree of its own.
var (
	pageReportingDir = "/sys/module/page_reporting/parameters"
	damonAdminDir    = "/sys/kernel/mm/damon/admin/kdamonds"
)

// pageReporting describes free page reporting ("" when the kernel has
// none) and how much it has reported so far (-1: the kernel doesn't say;
// reported_kib is not in every kernel).
func pageReporting() (desc string, reportedKiB int64) {
	order, err := os.ReadFile(filepath.Join(pageReportingDir, "page_reporting_order"))
	if err != nil {
		return "", -1
	}
	reportedKiB = -1
	if b, err := os.ReadFile(filepath.Join(pageReportingDir, "reported_kib")); err == nil {
		if v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil {
			reportedKiB = v
		}
	}
	o, _ := strconv.Atoi(strings.TrimSpace(string(order)))
	desc = fmt.Sprintf("free page reporting on: free blocks of %s and up go back to the host", units(int64(os.Getpagesize())<<o))
	if b, err := os.ReadFile(filepath.Join(pageReportingDir, "min_free_ms")); err == nil {
		desc += fmt.Sprintf(" once free for %s ms", strings.TrimSpace(string(b)))
	}
	return desc, reportedKiB
}

// kdamond is one running DAMON worker.
type kdamond struct {
	pid     int
	ops     []string // the contexts' address spaces (paddr: all of memory)
	actions []string // the schemes' actions (pageout, …)
}

// kdamonds lists the DAMON workers that are on.
func kdamonds() []kdamond {
	dirs, _ := filepath.Glob(filepath.Join(damonAdminDir, "[0-9]*"))
	var out []kdamond
	for _, d := range dirs {
		if st, _ := os.ReadFile(filepath.Join(d, "state")); strings.TrimSpace(string(st)) != "on" {
			continue
		}
		b, _ := os.ReadFile(filepath.Join(d, "pid"))
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 {
			continue
		}
		k := kdamond{pid: pid}
		ctxs, _ := filepath.Glob(filepath.Join(d, "contexts", "[0-9]*"))
		for _, c := range ctxs {
			if b, err := os.ReadFile(filepath.Join(c, "operations")); err == nil {
				k.ops = append(k.ops, strings.TrimSpace(string(b)))
			}
			acts, _ := filepath.Glob(filepath.Join(c, "schemes", "[0-9]*", "action"))
			for _, a := range acts {
				if b, err := os.ReadFile(a); err == nil {
					k.actions = append(k.actions, strings.TrimSpace(string(b)))
				}
			}
		}
		out = append(out, k)
	}
	return out
}

// memoryReturn is a snapshot of both, to diff over a section.
type memoryReturn struct {
	reporting   string
	reportedKiB int64
	damon       []kdamond
	damonCPU    float64 // ms, summed over the kdamonds
}

func snapMemoryReturn() memoryReturn {
	var m memoryReturn
	m.reporting, m.reportedKiB = pageReporting()
	m.damon = kdamonds()
	for _, k := range m.damon {
		ms, _ := procSched(k.pid)
		m.damonCPU += ms
	}
	return m
}

// units is n bytes as KiB or MiB.
func units(n int64) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d KiB", n>>10)
}

// describe says what happened between m and later (wall ms apart), in a
// sentence for the report ("" when the machine does neither).
func (m memoryReturn) describe(later memoryReturn, wall float64) string {
	var parts []string
	if m.reporting != "" {
		s := m.reporting
		if m.reportedKiB >= 0 && later.reportedKiB >= m.reportedKiB {
			s += fmt.Sprintf(" (%.1f GiB handed back while the sandboxes were created)", gib(later.reportedKiB-m.reportedKiB))
		}
		parts = append(parts, s)
	}
	if len(m.damon) > 0 {
		var what []string
		for _, k := range m.damon {
			what = append(what, fmt.Sprintf("ops %s, actions %s", strings.Join(k.ops, "/"), strings.Join(k.actions, "/")))
		}
		s := fmt.Sprintf("DAMON on (%d kdamond: %s)", len(m.damon), strings.Join(what, "; "))
		if wall > 0 && later.damonCPU >= m.damonCPU {
			s += fmt.Sprintf(", its threads busy %.1f%% of one CPU during this section", 100*(later.damonCPU-m.damonCPU)/wall)
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return ""
	}
	return "What the machine did with memory meanwhile (sysfs): " + strings.Join(parts, "; ") + "."
}

func gib(kib int64) float64 { return float64(kib) / (1 << 20) }
