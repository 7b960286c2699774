//go:build linux

package isolate

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

type limits struct {
	memory int64
	cpus   float64
	pids   int64
}

func (l limits) any() bool { return l.memory > 0 || l.cpus > 0 || l.pids > 0 }

// cgroup is one sandbox's cgroup: a single directory on v2, one directory per
// controller (memory, cpu, pids) on v1.
type cgroup struct {
	v2   bool
	dirs []string          // every directory created, removed by remove()
	ctrl map[string]string // controller -> directory
	// parents are intermediate "code-sandboxes" directories (v1), removed
	// when they become empty.
	parents []string
}

const cgroupGroupName = "code-sandboxes"

// cgroupFS is where our own cgroup lives in each usable hierarchy.
type cgroupFS struct {
	v1 map[string]string // v1 controller -> directory of our own cgroup in it
	// v1CPUAcct: cpuacct shares the cpu controller's hierarchy, so that
	// a cpu cgroup also counts the sandbox's CPU time (Usage reads it).
	v1CPUAcct bool
	v2        string // v2: directory of our own cgroup ("" if no usable v2)
	v2Root    string // v2 mount point
}

// detectCgroups reads /proc/self/mountinfo and /proc/self/cgroup.
func detectCgroups() (cgroupFS, error) {
	var c cgroupFS
	own := map[string]string{} // v1 controller (or "" for v2) -> path
	cg, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return c, err
	}
	for line := range strings.Lines(string(cg)) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			own[""] = parts[2]
			continue
		}
		for _, ctl := range strings.Split(parts[1], ",") {
			own[ctl] = parts[2]
		}
	}
	mi, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return c, err
	}
	defer mi.Close()
	c.v1 = map[string]string{}
	sc := bufio.NewScanner(mi)
	for sc.Scan() {
		// id parent maj:min root mountpoint opts [optional...] - fstype source superopts
		f := strings.Fields(sc.Text())
		sep := -1
		for i, x := range f {
			if x == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+3 >= len(f) || len(f) < 5 {
			continue
		}
		root, mnt, fstype := unescapeMount(f[3]), unescapeMount(f[4]), f[sep+1]
		rel := func(p string) string {
			// With a cgroup namespace the mount root and our path are both
			// relative to the namespace; strip the mount root.
			if root != "/" {
				p = strings.TrimPrefix(p, root)
			}
			return filepath.Join(mnt, p)
		}
		switch fstype {
		case "cgroup":
			opts := strings.Split(f[sep+3], ",")
			for _, opt := range opts {
				if p, ok := own[opt]; ok && (opt == "memory" || opt == "cpu" || opt == "pids") {
					if _, dup := c.v1[opt]; !dup {
						c.v1[opt] = rel(p)
						if opt == "cpu" {
							c.v1CPUAcct = contains(opts, "cpuacct")
						}
					}
				}
			}
		case "cgroup2":
			if p, ok := own[""]; ok && c.v2 == "" {
				// A v2 mount with no controllers (hybrid systems) is useless.
				b, _ := os.ReadFile(filepath.Join(mnt, "cgroup.controllers"))
				if len(strings.TrimSpace(string(b))) > 0 {
					c.v2, c.v2Root = rel(p), mnt
				}
			}
		}
	}
	return c, sc.Err()
}

func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// newCgroup creates the sandbox's cgroup in the hierarchies fsys describes
// (detectCgroups; ferr its error) and writes its limits. It returns (nil,
// nil) when no cgroup can be created and no limit was asked for.
func newCgroup(fsys cgroupFS, ferr error, id string, l limits) (*cgroup, error) {
	if ferr != nil {
		if l.any() {
			return nil, fmt.Errorf("cgroups: %w", ferr)
		}
		return nil, nil
	}
	// v1 controllers win: on hybrid systems (like our build machines) the
	// controllers are bound to v1 and the v2 mount is empty.
	if len(fsys.v1) > 0 {
		return newCgroupV1(id, l, fsys.v1, fsys.v1CPUAcct)
	}
	if fsys.v2 != "" {
		return newCgroupV2(id, l, fsys.v2, fsys.v2Root)
	}
	if l.any() {
		return nil, errors.New("cgroups: resource limits requested but no cgroup v1 memory/cpu/pids hierarchy nor a cgroup v2 hierarchy with controllers is mounted")
	}
	return nil, nil
}

// newCgroupV1 creates <own cgroup>/code-sandboxes/<id> in the memory, cpu and
// pids hierarchies. Nesting under our own cgroup (rather than the hierarchy
// root) keeps the sandbox inside whatever limits apply to its creator.
//
// The cpu one only with a CPU limit or when it also counts CPU time
// (cpuAcct: cpuacct mounted with cpu, as systemd does): otherwise it would
// do nothing, and moving a running thread into a new cpu cgroup costs the
// start up to milliseconds on a busy host (the thread loses the CPU and
// queues again under the new group).
func newCgroupV1(id string, l limits, own map[string]string, cpuAcct bool) (_ *cgroup, err error) {
	// cg is not the named result: "return nil, err" must not hide it from
	// the deferred cleanup.
	cg := &cgroup{ctrl: map[string]string{}}
	defer func() {
		if err != nil {
			cg.remove()
		}
	}()
	want := map[string]bool{"memory": l.memory > 0, "cpu": l.cpus > 0, "pids": l.pids > 0}
	for _, ctl := range []string{"memory", "cpu", "pids"} {
		base, ok := own[ctl]
		if ctl == "cpu" && !want[ctl] && !cpuAcct {
			continue
		}
		if !ok {
			if want[ctl] {
				return nil, fmt.Errorf("cgroup v1: a %s limit was requested but the %s controller is not mounted", ctl, ctl)
			}
			continue
		}
		parent := filepath.Join(base, cgroupGroupName)
		dir := filepath.Join(parent, id)
		if err := mkdirCgroup(parent, dir); err != nil {
			if want[ctl] {
				return nil, fmt.Errorf("cgroup v1: cannot create %s (needed for the %s limit): %w; run as root or give this user a writable (delegated) %s cgroup", dir, ctl, err, ctl)
			}
			continue // best effort: without limits the cgroup only adds bookkeeping
		}
		cg.dirs = append(cg.dirs, dir)
		cg.parents = append(cg.parents, parent)
		cg.ctrl[ctl] = dir
	}
	if l.memory > 0 {
		d := cg.ctrl["memory"]
		if err := writeFile(d, "memory.limit_in_bytes", strconv.FormatInt(l.memory, 10)); err != nil {
			return nil, err
		}
		// memsw exists only with swap accounting (swapaccount=1). Without
		// it swap cannot be limited on v1; the RAM limit still holds.
		if _, err := os.Stat(filepath.Join(d, "memory.memsw.limit_in_bytes")); err == nil {
			if err := writeFile(d, "memory.memsw.limit_in_bytes", strconv.FormatInt(l.memory, 10)); err != nil {
				return nil, err
			}
		}
	}
	if l.cpus > 0 {
		d := cg.ctrl["cpu"]
		quota, period := cpuQuota(l.cpus)
		if err := writeFile(d, "cpu.cfs_period_us", strconv.FormatInt(period, 10)); err != nil {
			return nil, err
		}
		if err := writeFile(d, "cpu.cfs_quota_us", strconv.FormatInt(quota, 10)); err != nil {
			return nil, err
		}
	}
	if l.pids > 0 {
		if err := writeFile(cg.ctrl["pids"], "pids.max", strconv.FormatInt(l.pids, 10)); err != nil {
			return nil, err
		}
	}
	if len(cg.dirs) == 0 {
		return nil, nil
	}
	return cg, nil
}

const cgroupV2InitLeaf = "code-sandboxes-creator"

// newCgroupV2 creates <own cgroup>/code-sandbox-<id>. Our own cgroup must
// be writable (root, or a systemd-delegated cgroup for a user) and must be
// able to enable controllers for its children, which cgroup v2 forbids while
// it contains processes ("no internal processes"). If we are the only process
// in it we move ourselves into a leaf child, as podman/crun do; as root we
// fall back to the hierarchy root.
func newCgroupV2(id string, l limits, own, root string) (_ *cgroup, err error) {
	var need []string
	if l.memory > 0 {
		need = append(need, "memory")
	}
	if l.cpus > 0 {
		need = append(need, "cpu")
	}
	if l.pids > 0 {
		need = append(need, "pids")
	}
	base, err := prepareV2Parent(own, need)
	if err != nil && os.Geteuid() == 0 && own != root {
		base = filepath.Join(root, cgroupGroupName)
		if err2 := os.Mkdir(base, 0o755); err2 != nil && !errors.Is(err2, fs.ErrExist) {
			return nil, fmt.Errorf("cgroup v2: %w", err2)
		}
		if err2 := enableControllers(root, need); err2 == nil {
			base, err = prepareV2Parent(base, need)
		}
	}
	if err != nil {
		if !l.any() {
			return nil, nil // no limits wanted: run without a cgroup
		}
		return nil, fmt.Errorf("cgroup v2: resource limits need a writable, delegated cgroup: %w (for a user session: run under `systemd-run --user --scope -p Delegate=yes ...`)", err)
	}
	dir := filepath.Join(base, "code-sandbox-"+id)
	if err := os.Mkdir(dir, 0o755); err != nil {
		if !l.any() {
			return nil, nil
		}
		return nil, fmt.Errorf("cgroup v2: %w", err)
	}
	cg := &cgroup{v2: true, dirs: []string{dir}, ctrl: map[string]string{"memory": dir, "cpu": dir, "pids": dir}}
	defer func() {
		if err != nil {
			cg.remove()
		}
	}()
	if l.memory > 0 {
		if err := writeFile(dir, "memory.max", strconv.FormatInt(l.memory, 10)); err != nil {
			return nil, err
		}
		// v2 limits swap separately; 0 makes memory+swap equal the memory
		// limit. The file is absent without swap accounting.
		if _, err := os.Stat(filepath.Join(dir, "memory.swap.max")); err == nil {
			if err := writeFile(dir, "memory.swap.max", "0"); err != nil {
				return nil, err
			}
		}
	}
	if l.cpus > 0 {
		quota, period := cpuQuota(l.cpus)
		if err := writeFile(dir, "cpu.max", fmt.Sprintf("%d %d", quota, period)); err != nil {
			return nil, err
		}
	}
	if l.pids > 0 {
		if err := writeFile(dir, "pids.max", strconv.FormatInt(l.pids, 10)); err != nil {
			return nil, err
		}
	}
	return cg, nil
}

// prepareV2Parent makes sure children of dir get the controllers in need.
func prepareV2Parent(dir string, need []string) (string, error) {
	if err := syscall.Access(filepath.Join(dir, "cgroup.procs"), 2 /* W_OK */); err != nil {
		return "", fmt.Errorf("%s is not writable by uid %d: %w", dir, os.Geteuid(), err)
	}
	avail, _ := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	have := strings.Fields(string(avail))
	for _, c := range need {
		if !contains(have, c) {
			return "", fmt.Errorf("controller %q is not delegated to %s (available: %q)", c, dir, have)
		}
	}
	err := enableControllers(dir, need)
	if errors.Is(err, syscall.EBUSY) {
		// "No internal processes": move ourselves into a leaf, but only if
		// we are alone here — moving other processes is not ours to do.
		procs, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if strings.TrimSpace(string(procs)) != strconv.Itoa(os.Getpid()) {
			return "", fmt.Errorf("cannot enable controllers in %s: it contains other processes", dir)
		}
		leaf := filepath.Join(dir, cgroupV2InitLeaf)
		if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", err
		}
		if err := writeFile(leaf, "cgroup.procs", strconv.Itoa(os.Getpid())); err != nil {
			return "", err
		}
		err = enableControllers(dir, need)
	}
	if err != nil {
		return "", err
	}
	return dir, nil
}

func enableControllers(dir string, need []string) error {
	cur, _ := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	have := strings.Fields(string(cur))
	var add []string
	for _, c := range need {
		if !contains(have, c) {
			add = append(add, "+"+c)
		}
	}
	if len(add) == 0 {
		return nil
	}
	return writeFile(dir, "cgroup.subtree_control", strings.Join(add, " "))
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// cpuQuota converts CPUs into a CFS quota/period pair (period 100 ms, the
// kernel default; quota at least 1 ms, the kernel minimum).
func cpuQuota(cpus float64) (quota, period int64) {
	period = 100000
	quota = max(int64(cpus*float64(period)), 1000)
	return quota, period
}

func mkdirCgroup(parent, dir string) error {
	for range 3 {
		if err := os.Mkdir(parent, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		err := os.Mkdir(dir, 0o755)
		if errors.Is(err, fs.ErrNotExist) {
			continue // parent removed concurrently by another sandbox's cleanup
		}
		return err
	}
	return fmt.Errorf("mkdir %s: parent keeps disappearing", dir)
}

func writeFile(dir, name, val string) error {
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(val), 0o644); err != nil { // mode only matters for fake trees in tests
		return fmt.Errorf("write %q to %s: %w", val, p, err)
	}
	return nil
}

// add moves pid (all its threads) into the cgroup.
func (cg *cgroup) add(pid int) error {
	for _, d := range cg.dirs {
		if err := writeFile(d, "cgroup.procs", strconv.Itoa(pid)); err != nil {
			return err
		}
	}
	return nil
}

// events reports whether the cgroup saw an OOM kill / hit its pids limit.
func (cg *cgroup) events() (oom, pids bool) {
	if d, ok := cg.ctrl["memory"]; ok {
		file := "memory.oom_control" // v1: "oom_kill N" (kernel >= 4.13)
		if cg.v2 {
			file = "memory.events"
		}
		oom = keyedValue(filepath.Join(d, file), "oom_kill") > 0
	}
	if d, ok := cg.ctrl["pids"]; ok {
		pids = keyedValue(filepath.Join(d, "pids.events"), "max") > 0
	}
	return oom, pids
}

func keyedValue(path, key string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == key {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}

// procs lists the pids in the cgroup.
func (cg *cgroup) procs() []int {
	seen := map[int]bool{}
	var out []int
	for _, d := range cg.dirs {
		b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil && !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
	}
	return out
}

// killAll SIGKILLs every process in the cgroup. cgroup.kill (v2, 5.14+)
// is atomic; otherwise kill by pid, which is fine here because the sandbox
// cannot fork faster than we kill: the init is SIGKILLed too, and its death
// kills the whole pid namespace.
func (cg *cgroup) killAll() error {
	if cg.v2 {
		if err := writeFile(cg.dirs[0], "cgroup.kill", "1"); err == nil {
			return nil
		}
	}
	for range 10 {
		ps := cg.procs()
		if len(ps) == 0 {
			return nil
		}
		for _, pid := range ps {
			if pid == os.Getpid() {
				// Never: the thread that clones the init sits in its
				// cgroups for that moment (startOnThread), and is moved out
				// before anything can kill.
				continue
			}
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	return nil
}

// remove deletes the cgroup directories, killing leftovers. Idempotent.
func (cg *cgroup) remove() error {
	var errs []error
	for _, d := range cg.dirs {
		deadline := time.Now().Add(2 * time.Second)
		for {
			err := syscall.Rmdir(d)
			if err == nil || errors.Is(err, syscall.ENOENT) {
				break
			}
			if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
				break
			}
			// Still populated: dying processes are not yet fully gone.
			cg.killAll()
			time.Sleep(5 * time.Millisecond)
		}
	}
	for _, p := range cg.parents {
		syscall.Rmdir(p) // only succeeds once no other sandbox uses it
	}
	return errors.Join(errs...)
}

// cheapThreadMove reports whether the kernel moves the calling thread
// alone into a v1 cgroup (a write of "0" to tasks) without taking its
// global cgroup_threadgroup_rwsem, which kernels since about 6.0 skip for
// the current thread. Measured on 6.18: ~0.1 ms, where moving another
// process after a quiet spell waits for an RCU grace period first (5-15
// ms on this 2-core host). An older kernel waits for that grace period in
// the thread's move too, on the critical path rather than beside the
// child's start: there the child is moved after its clone, as before.
func cheapThreadMove() bool {
	kernelOnce.Do(func() {
		var u unix.Utsname
		if unix.Uname(&u) != nil {
			return
		}
		var major, minor int
		if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &major, &minor); err == nil {
			kernelThreadMove = major > 6 || major == 6 && minor >= 1
		}
	})
	return kernelThreadMove
}

var (
	kernelOnce       sync.Once
	kernelThreadMove bool
)
