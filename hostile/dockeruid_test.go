package hostile_test

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	mobyclient "github.com/moby/moby/client"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
)

// TestDockerHostUIDPerSandbox (issue #21 item 4): every process of a docker
// sandbox (the agent, its kernel, what user code starts) runs as a host uid
// of that sandbox's own, never host uid 1000 (the host's own first user, and
// what every docker sandbox ran as before) nor 0, while user code still
// sees the contract's uid 1000 and gid 100. Read on the host, in
// /proc/<pid>/status of every process in the container.
func TestDockerHostUIDPerSandbox(t *testing.T) {
	if testing.Short() {
		t.Skip("creates containers")
	}
	requireStaticBinary(t)
	c := dockerEngine(t)
	cfg := sandboxes.Config{Variant: "docker", EnvironmentDir: envStoreDir, NetworkPolicy: sandboxes.NetworkNone}
	pythonEnv(t)
	warmUp(t, cfg)
	uids := map[string]int{}
	for i := range 2 {
		sb := create(t, cfg)
		// A child process of user code, living past the execution.
		ex := runPy(t, sb, "import os, subprocess\nsubprocess.Popen(['sleep', '600'], start_new_session=True)\nprint(os.getuid(), os.getgid(), os.geteuid(), os.getegid())")
		if got := strings.TrimSpace(ex.Stdout()); got != "1000 100 1000 100" {
			t.Fatalf("sandbox %d: inside, uid gid euid egid = %q %v, want the contract's 1000 100 1000 100", i, got, ex.Error)
		}
		procs := containerProcs(t, c, sb.ID())
		if len(procs) < 3 {
			t.Fatalf("sandbox %d: %d processes in its container (%v), want the agent, its kernel and sleep at least", i, len(procs), procs)
		}
		var uid = -1
		for pid, ids := range procs {
			if ids.uid != ids.gid || ids.uid == 1000 || ids.uid == 0 || ids.uid < 100000 {
				t.Errorf("sandbox %d: host pid %d (%s) runs as host uid %d gid %d, want one of its own", i, pid, ids.comm, ids.uid, ids.gid)
			}
			if uid == -1 {
				uid = ids.uid
			} else if ids.uid != uid {
				t.Errorf("sandbox %d: its processes run as several host uids: %v", i, procs)
			}
		}
		for other, u := range uids {
			if u == uid {
				t.Errorf("sandbox %s and %s share host uid %d", other, sb.ID(), uid)
			}
		}
		uids[sb.ID()] = uid
		t.Logf("sandbox %s: %d processes, all host uid %d", sb.ID(), len(procs), uid)
	}
	t.Logf("RESULT %s: two sandboxes, host uids %v; inside, uid 1000 gid 100", t.Name(), uids)
}

type hostIDs struct {
	uid, gid int
	comm     string
}

// containerProcs returns the host's view (pid → ids) of every process in
// sandbox id's container: its init and all its descendants.
func containerProcs(t *testing.T, c *mobyclient.Client, id string) map[int]hostIDs {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := &dockerSandboxes{c: c}
	cs := d.containers(t, "code-sandboxes.id="+id)
	if len(cs) != 1 {
		t.Fatalf("sandbox %s: %d containers", id, len(cs))
	}
	insp, err := c.ContainerInspect(ctx, cs[0], mobyclient.ContainerInspectOptions{})
	if err != nil || insp.Container.State == nil || insp.Container.State.Pid == 0 {
		t.Fatalf("sandbox %s: inspect: %v", id, err)
	}
	init := insp.Container.State.Pid
	// Everyone's parent, then the descendants of init.
	parent := map[int]int{}
	all := map[int]hostIDs{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ids, ppid, ok := procStatus(pid)
		if ok {
			parent[pid] = ppid
			all[pid] = ids
		}
	}
	out := map[int]hostIDs{}
	for pid, ids := range all {
		for p, n := pid, 0; p > 1 && n < 64; p, n = parent[p], n+1 {
			if p == init {
				out[pid] = ids
				break
			}
		}
	}
	return out
}

func procStatus(pid int) (hostIDs, int, bool) {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return hostIDs{}, 0, false
	}
	defer f.Close()
	var ids hostIDs
	ppid, n := 0, 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		fs := strings.Fields(v)
		if len(fs) == 0 {
			continue
		}
		switch k {
		case "Name":
			ids.comm = fs[0]
		case "PPid":
			ppid, _ = strconv.Atoi(fs[0])
			n++
		case "Uid":
			// Real, effective, saved, fs: all must be the sandbox's.
			ids.uid, _ = strconv.Atoi(fs[0])
			for _, u := range fs[1:] {
				if u != fs[0] {
					ids.uid = -1
				}
			}
			n++
		case "Gid":
			ids.gid, _ = strconv.Atoi(fs[0])
			for _, g := range fs[1:] {
				if g != fs[0] {
					ids.gid = -1
				}
			}
			n++
		}
	}
	return ids, ppid, n == 3
}
