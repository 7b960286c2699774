package main

import (
	"fmt"
	"os"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// machine is what the report says about where it ran, measured rather
// than written in.
type machine struct {
	cores   int
	cpu     string
	memory  string
	kernel  string
	cgroup  string
	loadavg string
	goVer   string
	// memReturn: free page reporting and DAMON (memreturn.go).
	memReturn memoryReturn
}

func measureMachine() machine {
	m := machine{cores: runtime.NumCPU(), goVer: runtime.Version(), memReturn: snapMemoryReturn()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemTotal:" {
				var kb float64
				fmt.Sscan(f[1], &kb)
				m.memory = fmt.Sprintf("%.1f GiB", kb/(1<<20))
			}
		}
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.kernel = unix.ByteSliceToString(u.Sysname[:]) + " " + unix.ByteSliceToString(u.Release[:])
	}
	m.cgroup = "v1"
	if cgroup2Mounted("/sys/fs/cgroup") {
		m.cgroup = "v2"
	} else if _, err := os.Stat("/sys/fs/cgroup/unified/cgroup.controllers"); err == nil {
		m.cgroup = "hybrid (v1 controllers, v2 mounted at /sys/fs/cgroup/unified)"
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(b))
		if len(f) >= 3 {
			m.loadavg = strings.Join(f[:3], " ")
		}
	}
	return m
}

func writeMachine(rep *strings.Builder, before, after machine) {
	rep.WriteString("| machine | |\n|---|---|\n")
	fmt.Fprintf(rep, "| CPU | %d cores, %s |\n", before.cores, orUnknown(before.cpu))
	fmt.Fprintf(rep, "| memory | %s |\n", orUnknown(before.memory))
	fmt.Fprintf(rep, "| kernel | %s |\n", orUnknown(before.kernel))
	fmt.Fprintf(rep, "| cgroups | %s |\n", before.cgroup)
	fmt.Fprintf(rep, "| Go | %s |\n", before.goVer)
	mr := before.memReturn
	fmt.Fprintf(rep, "| freed memory back to the host | %s |\n", orNone(mr.reporting, "no free page reporting"))
	var damon []string
	for _, k := range mr.damon {
		damon = append(damon, fmt.Sprintf("kdamond (pid %d): ops %s, actions %s", k.pid, strings.Join(k.ops, "/"), strings.Join(k.actions, "/")))
	}
	fmt.Fprintf(rep, "| DAMON | %s |\n", orNone(strings.Join(damon, "; "), "off"))
	fmt.Fprintf(rep, "| load average (1, 5, 15 min) | before %s, after %s |\n\n", orUnknown(before.loadavg), orUnknown(after.loadavg))
}

func orNone(s, none string) string {
	if s == "" {
		return none
	}
	return s
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
