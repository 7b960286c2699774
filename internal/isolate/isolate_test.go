//go:build linux

package isolate

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/code-sandboxes/code-sandboxes/internal/testdep"
)

// The test binary doubles as the sandbox init: TestMain detects the child,
// calls Child and runs the mode named in ISOLATE_TEST_MODE.
func TestMain(m *testing.M) {
	testMainEarly()
	if IsSudo() {
		os.Exit(Sudo())
	}
	if IsChild() && os.Getenv("ISOLATE_TEST_MODE") == "root-before-ready" {
		// As the local variant's agent does: work, then ready.
		ready, err := ChildAsync()
		if err != nil {
			fmt.Fprintln(os.Stderr, "ChildAsync:", err)
			os.Exit(3)
		}
		early := RootAvailable()
		if err := ready(); err != nil {
			fmt.Fprintln(os.Stderr, "ready:", err)
			os.Exit(3)
		}
		fmt.Printf("root before ready: %v, after: %v\n", early, RootAvailable())
		os.Exit(0)
	}
	if IsChild() && strings.HasPrefix(os.Getenv("ISOLATE_TEST_MODE"), "root-held") {
		// As the local variant's agent does: ready, the broker held.
		ready, err := ChildAsync()
		if err != nil {
			fmt.Fprintln(os.Stderr, "ChildAsync:", err)
			os.Exit(3)
		}
		if err := ready(); err != nil {
			fmt.Fprintln(os.Stderr, "ready:", err)
			os.Exit(3)
		}
		os.Exit(rootHeldChecks(os.Getenv("ISOLATE_TEST_MODE")))
	}
	if IsChild() && os.Getenv("ISOLATE_TEST_MODE") == "early-mem" {
		SetEarlyStart(earlyProbe(earlyMemProbe, true))
	}
	if IsChild() && os.Getenv("ISOLATE_TEST_MODE") == "early-mem-async" {
		SetEarlyStart(earlyProbe(earlyMemLoop, false))
	}
	if IsChild() {
		if err := Child(); err != nil {
			fmt.Fprintln(os.Stderr, "Child:", err)
			os.Exit(3)
		}
		os.Exit(childMain(os.Getenv("ISOLATE_TEST_MODE")))
	}
	// The sandboxes startSandbox starts run the test binary from an
	// execute-only copy, as the local variant's do (Spec.ExecOnlyDir).
	dir, err := os.MkdirTemp("", "isolate-exec-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	execOnlyTestDir = filepath.Join(dir, "exec")
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// execOnlyTestDir is startSandbox's Spec.ExecOnlyDir.
var execOnlyTestDir string

func childMain(mode string) int {
	switch mode {
	case "checks":
		return runChecks()
	case "exit7":
		return 7
	case "early-mem":
		return 0
	case "early-mem-async":
		time.Sleep(time.Second) // the probe's 300 ms, and its last try
		return 0
	case "threads":
		return runThreadChecks()
	case "rootfs-checks":
		return runChecks() + runRootfsChecks()
	case "root-user":
		return runRootUserChecks()
	case "writable-root":
		return runWritableRootChecks()
	case "root-absent":
		return runRootAbsentChecks()
	case "hog":
		var keep [][]byte
		for i := 0; i < 1024; i++ { // up to 1 GiB, 1 MiB at a time, touched
			b := make([]byte, 1<<20)
			for j := range b {
				if j%4096 == 0 {
					b[j] = 1
				}
			}
			keep = append(keep, b)
		}
		fmt.Println("survived", len(keep))
		return 0
	case "forkbomb":
		started, failed := 0, 0
		var cmds []*exec.Cmd
		for i := 0; i < 200; i++ {
			c := exec.Command("/bin/sleep", "30")
			if err := c.Start(); err != nil {
				failed++
				continue
			}
			started++
			cmds = append(cmds, c)
		}
		fmt.Printf("started %d failed %d\n", started, failed)
		for _, c := range cmds {
			c.Process.Kill()
			c.Wait()
		}
		return 0
	case "sleepers":
		for i := 0; i < 5; i++ {
			c := exec.Command("/bin/sleep", "1000")
			if err := c.Start(); err != nil {
				fmt.Println("error", err)
				return 1
			}
		}
		fmt.Println("ready")
		time.Sleep(time.Hour) // not select{}: the runtime would call that a deadlock and exit
	case "idle":
		fmt.Println("ready")
		time.Sleep(time.Hour) // not select{}: the runtime would call that a deadlock and exit
	case "dial":
		c, err := net.DialTimeout("tcp", os.Getenv("HOST_ADDR"), 2*time.Second)
		if err != nil {
			fmt.Println("dial failed:", err)
			return 1
		}
		c.Close()
		fmt.Println("dial ok")
		return 0
	}
	fmt.Println("unknown mode", mode)
	return 2
}

// runChecks verifies the sandbox contract from the inside; one line per
// check, "ok <name>" or "FAIL <name>: <detail>".
func runChecks() int {
	failed := 0
	check := func(name string, err error) {
		if err != nil {
			failed++
			fmt.Printf("FAIL %s: %v\n", name, err)
		} else {
			fmt.Printf("ok %s\n", name)
		}
	}
	expectErrno := func(want syscall.Errno, err error) error {
		if !errors.Is(err, want) {
			return fmt.Errorf("got %v, want %v", err, want)
		}
		return nil
	}
	status, _ := os.ReadFile("/proc/self/status")
	field := func(k string) string {
		for line := range strings.Lines(string(status)) {
			if v, ok := strings.CutPrefix(line, k+":"); ok {
				return strings.TrimSpace(v)
			}
		}
		return "?"
	}

	check("uid/gid 1000/100", func() error {
		if os.Getuid() != 1000 || os.Geteuid() != 1000 || os.Getgid() != 100 || os.Getegid() != 100 {
			return fmt.Errorf("uid %d euid %d gid %d egid %d", os.Getuid(), os.Geteuid(), os.Getgid(), os.Getegid())
		}
		return nil
	}())
	check("caps all zero", func() error {
		for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
			if v := field(k); v != "0000000000000000" {
				return fmt.Errorf("%s=%s", k, v)
			}
		}
		return nil
	}())
	check("NoNewPrivs 1", func() error {
		if v := field("NoNewPrivs"); v != "1" {
			return fmt.Errorf("NoNewPrivs=%s", v)
		}
		return nil
	}())
	check("Seccomp 2", func() error {
		if v := field("Seccomp"); v != "2" {
			return fmt.Errorf("Seccomp=%s", v)
		}
		return nil
	}())
	check("pid 1", func() error {
		if os.Getpid() != 1 {
			return fmt.Errorf("pid %d", os.Getpid())
		}
		return nil
	}())
	check("only own processes in /proc", func() error {
		ents, err := os.ReadDir("/proc")
		if err != nil {
			return err
		}
		var pids []int
		for _, e := range ents {
			if n, err := strconv.Atoi(e.Name()); err == nil {
				pids = append(pids, n)
			}
		}
		if len(pids) == 0 || len(pids) > 5 || pids[0] != 1 {
			return fmt.Errorf("pids %v", pids)
		}
		if hp := os.Getenv("HOST_PID"); hp != "" {
			if _, err := os.Stat("/proc/" + hp); err == nil && hp != "1" {
				return fmt.Errorf("host pid %s visible", hp)
			}
		}
		return nil
	}())
	check("cgroup namespace root", func() error {
		b, err := os.ReadFile("/proc/self/cgroup")
		if err != nil {
			return err
		}
		for line := range strings.Lines(string(b)) {
			if !strings.HasSuffix(strings.TrimSpace(line), ":/") {
				return fmt.Errorf("cgroup line %q", strings.TrimSpace(line))
			}
		}
		return nil
	}())
	check("hidden host dirs", func() error {
		for _, p := range []string{"/root", "/var/lib", "/opt", "/srv", "/run", "/mnt", "/media", "/boot", "/sys", os.Getenv("HOST_CWD")} {
			if _, err := os.Stat(p); err == nil {
				return fmt.Errorf("%s is visible", p)
			}
		}
		ents, err := os.ReadDir("/home")
		if err != nil || len(ents) != 1 || ents[0].Name() != "user" {
			return fmt.Errorf("/home: %v %v", ents, err)
		}
		return nil
	}())
	check("read-only system dirs, root a bounded tmpfs", func() error {
		for _, p := range []string{"/usr/x", "/etc/x", "/bin/x", "/lib/x"} {
			if err := os.WriteFile(p, nil, 0o644); err == nil {
				return fmt.Errorf("could write %s", p)
			}
		}
		var st unix.Statfs_t
		// The root directory is the sandbox's own tmpfs (writableroot.go):
		// writable, but nosuid and nodev.
		if err := unix.Statfs("/", &st); err != nil || st.Type != unix.TMPFS_MAGIC || st.Flags&unix.ST_NOSUID == 0 || st.Flags&unix.ST_NODEV == 0 {
			return fmt.Errorf("/ type %#x flags %#x (%v)", st.Type, st.Flags, err)
		}
		if err := unix.Statfs("/usr", &st); err != nil || st.Flags&unix.ST_RDONLY == 0 || st.Flags&unix.ST_NOSUID == 0 {
			return fmt.Errorf("/usr flags %#x (%v)", st.Flags, err)
		}
		return nil
	}())
	check("writable tmp/home/files/shm", func() error {
		for _, d := range []string{"/tmp", "/home/user", "/files", "/dev/shm", "/var/tmp"} {
			if err := os.WriteFile(d+"/probe", []byte("x"), 0o644); err != nil {
				return err
			}
		}
		fi, err := os.Stat("/tmp")
		if err != nil || fi.Mode()&os.ModeSticky == 0 {
			return fmt.Errorf("/tmp not sticky: %v", err)
		}
		var st syscall.Stat_t
		if err := syscall.Stat("/home/user", &st); err != nil || st.Uid != 1000 || st.Gid != 100 {
			return fmt.Errorf("/home/user owner %d:%d (%v)", st.Uid, st.Gid, err)
		}
		return nil
	}())
	check("home size limit", func() error {
		f, err := os.Create("/home/user/big")
		if err != nil {
			return err
		}
		defer os.Remove("/home/user/big")
		defer f.Close()
		_, err = f.Write(make([]byte, 5<<20)) // home is 4 MiB in this test
		if err == nil {
			return errors.New("wrote 5 MiB into a 4 MiB home")
		}
		return nil
	}())
	check("cwd /home/user", func() error {
		wd, err := os.Getwd()
		if wd != "/home/user" {
			return fmt.Errorf("cwd %q %v", wd, err)
		}
		return nil
	}())
	check("mount EPERM", expectErrno(unix.EPERM, unix.Mount("tmpfs", "/tmp", "tmpfs", 0, "")))
	check("umount EPERM", expectErrno(unix.EPERM, unix.Unmount("/tmp", unix.MNT_DETACH)))
	check("unshare EPERM", expectErrno(unix.EPERM, unix.Unshare(unix.CLONE_NEWUSER)))
	check("setns EPERM", expectErrno(unix.EPERM, unix.Setns(0, 0)))
	check("ptrace EPERM", func() error {
		_, _, e := unix.Syscall(unix.SYS_PTRACE, unix.PTRACE_TRACEME, 0, 0)
		return expectErrno(unix.EPERM, e)
	}())
	check("clone with CLONE_NEWNS EPERM", func() error {
		c := exec.Command("/bin/true")
		c.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWNS}
		return expectErrno(unix.EPERM, c.Run())
	}())
	check("clone3 ENOSYS", func() error {
		_, _, e := unix.Syscall(unix.SYS_CLONE3, 0, 0, 0)
		return expectErrno(unix.ENOSYS, e)
	}())
	check("personality", func() error {
		if _, _, e := unix.Syscall(unix.SYS_PERSONALITY, 0xffffffff, 0, 0); e != 0 {
			return fmt.Errorf("query: %v", e)
		}
		_, _, e := unix.Syscall(unix.SYS_PERSONALITY, 0x0040000 /* ADDR_NO_RANDOMIZE */, 0, 0)
		return expectErrno(unix.EPERM, e)
	}())
	check("AF_PACKET, AF_VSOCK EAFNOSUPPORT", func() error {
		if _, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM, 0); err != unix.EAFNOSUPPORT {
			return fmt.Errorf("vsock: %v", err)
		}
		_, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
		return expectErrno(unix.EAFNOSUPPORT, err)
	}())
	check("keyctl/bpf EPERM", func() error {
		if _, _, e := unix.Syscall(unix.SYS_KEYCTL, 0, 0, 0); e != unix.EPERM {
			return fmt.Errorf("keyctl: %v", e)
		}
		_, _, e := unix.Syscall(unix.SYS_BPF, 0, 0, 0)
		return expectErrno(unix.EPERM, e)
	}())
	check("exec works, threads work", func() error {
		out, err := exec.Command("/bin/sh", "-c", "id -u; id -g; echo $$").Output()
		if err != nil || strings.Fields(string(out))[0] != "1000" || strings.Fields(string(out))[1] != "100" {
			return fmt.Errorf("%q %v", out, err)
		}
		return nil
	}())
	check("passwd/group/hostname", func() error {
		pw, _ := os.ReadFile("/etc/passwd")
		gr, _ := os.ReadFile("/etc/group")
		h, _ := os.Hostname()
		if !strings.Contains(string(pw), "user:x:1000:100:") || !strings.Contains(string(gr), "users:x:100:") || h != "isotest" {
			return fmt.Errorf("passwd %q group %q hostname %q", pw, gr, h)
		}
		return nil
	}())
	check("network: only loopback, up", func() error {
		ifs, err := net.Interfaces()
		if err != nil {
			return err
		}
		if len(ifs) != 1 || ifs[0].Name != "lo" || ifs[0].Flags&net.FlagUp == 0 {
			return fmt.Errorf("interfaces %v", ifs)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		defer l.Close()
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			return fmt.Errorf("own loopback: %v", err)
		}
		c.Close()
		if c, err := net.DialTimeout("tcp", os.Getenv("HOST_ADDR"), time.Second); err == nil {
			c.Close()
			return errors.New("reached the host's listener")
		}
		return nil
	}())
	check("proc masked/read-only", func() error {
		if b, err := os.ReadFile("/proc/kcore"); err == nil && len(b) > 0 {
			return errors.New("/proc/kcore readable")
		}
		if err := os.WriteFile("/proc/sys/kernel/hostname", []byte("x"), 0); err == nil {
			return errors.New("/proc/sys writable")
		}
		return nil
	}())
	check("dev", func() error {
		ents, _ := os.ReadDir("/dev")
		allowed := map[string]bool{"null": true, "zero": true, "full": true, "random": true, "urandom": true, "tty": true, "pts": true, "ptmx": true, "shm": true, "fd": true, "stdin": true, "stdout": true, "stderr": true}
		for _, e := range ents {
			if !allowed[e.Name()] {
				return fmt.Errorf("unexpected /dev/%s", e.Name())
			}
		}
		if err := os.WriteFile("/dev/null", []byte("x"), 0); err != nil {
			return err
		}
		f, err := os.Open("/dev/urandom")
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = f.Read(make([]byte, 8))
		return err
	}())
	check("rlimits", func() error {
		var r unix.Rlimit
		unix.Getrlimit(unix.RLIMIT_NOFILE, &r)
		if r.Cur != DefaultNoFile || r.Max != DefaultNoFile {
			return fmt.Errorf("NOFILE %v", r)
		}
		unix.Getrlimit(unix.RLIMIT_CORE, &r)
		if r.Cur != 0 || r.Max != 0 {
			return fmt.Errorf("CORE %v", r)
		}
		unix.Getrlimit(unix.RLIMIT_FSIZE, &r)
		if r.Max != DefaultFilesSize {
			return fmt.Errorf("FSIZE %v", r)
		}
		return nil
	}())
	check("env var removed", func() error {
		if _, ok := os.LookupEnv(envKey); ok {
			return errors.New("still set")
		}
		return nil
	}())
	if failed > 0 {
		return 1
	}
	return 0
}

// startSandbox starts the test binary in mode and returns the process and
// a reader of its stdout.
func startSandbox(t *testing.T, spec Spec, mode string, env ...string) (*Process, *bufio.Reader) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	spec.Args = []string{"isolate.test"}
	spec.Env = append([]string{"ISOLATE_TEST_MODE=" + mode}, env...)
	if spec.ExecOnlyDir == "" {
		spec.ExecOnlyDir = execOnlyTestDir
	}
	spec.Stdout = w
	var stderr bytes.Buffer
	spec.Stderr = &stderr
	p, err := Start(context.Background(), spec)
	if err == nil {
		started.Store(p.ID, true)
	}
	w.Close()
	if err != nil {
		t.Fatalf("Start: %v (stderr: %s)", err, stderr.String())
	}
	t.Cleanup(func() {
		p.Kill()
		p.Wait()
		if err := p.Cleanup(); err != nil {
			t.Error(err)
		}
	})
	return p, bufio.NewReader(r)
}

func hostListener(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return l.Addr().String()
}

func requireRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for cgroup limits on this machine")
	}
}

func TestSandboxContract(t *testing.T) {
	if err := CheckSupport(); err != nil {
		testdep.Require(t, false, err.Error())
	}
	before, _ := os.ReadFile("/proc/self/mountinfo")
	wd, _ := os.Getwd()
	p, out := startSandbox(t, Spec{Hostname: "isotest", HomeSizeBytes: 4 << 20}, "checks",
		"HOST_ADDR="+hostListener(t), "HOST_CWD="+wd, "HOST_PID="+strconv.Itoa(os.Getpid()))
	after, _ := os.ReadFile("/proc/self/mountinfo")
	if !bytes.Equal(before, after) {
		t.Errorf("host mount table changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	all, _ := io.ReadAll(out)
	for line := range strings.Lines(string(all)) {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "FAIL") {
			t.Error(line)
		} else {
			t.Log(line)
		}
	}
	info, err := p.Wait()
	if err != nil || info.ExitCode != 0 {
		t.Errorf("Wait: %v %v", info, err)
	}
}

func TestExitCode(t *testing.T) {
	p, _ := startSandbox(t, Spec{}, "exit7")
	info, err := p.Wait()
	if err != nil || info.ExitCode != 7 || info.Signal != 0 || info.OOMKilled {
		t.Fatalf("Wait: %+v %v", info, err)
	}
}

func TestNetworkAll(t *testing.T) {
	p, out := startSandbox(t, Spec{Network: NetworkAll}, "dial", "HOST_ADDR="+hostListener(t))
	line, _ := out.ReadString('\n')
	if info, _ := p.Wait(); info.ExitCode != 0 {
		t.Fatalf("with Network=all the host listener must be reachable: %q %v", line, info)
	}
}

func TestMemoryLimitOOM(t *testing.T) {
	requireRoot(t)
	p, out := startSandbox(t, Spec{MemoryBytes: 64 << 20}, "hog")
	info, err := p.Wait()
	rest, _ := io.ReadAll(out)
	if err != nil || info.Signal != syscall.SIGKILL || !info.OOMKilled {
		t.Fatalf("Wait: %+v %v (output %q)", info, err, rest)
	}
	t.Logf("memory hog: %v", info)
}

func TestPidsLimit(t *testing.T) {
	requireRoot(t)
	p, out := startSandbox(t, Spec{Pids: 32}, "forkbomb")
	line, _ := out.ReadString('\n')
	info, err := p.Wait()
	var started, failed int
	fmt.Sscanf(line, "started %d failed %d", &started, &failed)
	if err != nil || failed == 0 || started >= 32 || !info.PidsLimitHit {
		t.Fatalf("fork bomb: %q, %+v %v", line, info, err)
	}
	t.Logf("fork bomb: %s, %v", strings.TrimSpace(line), info)
	// The host is unaffected.
	if err := exec.Command("/bin/true").Run(); err != nil {
		t.Fatalf("host cannot fork: %v", err)
	}
}

func TestCPUQuota(t *testing.T) {
	requireRoot(t)
	p, out := startSandbox(t, Spec{CPUs: 0.5}, "idle")
	out.ReadString('\n')
	for _, d := range p.CgroupDirs() {
		if b, err := os.ReadFile(filepath.Join(d, "cpu.cfs_quota_us")); err == nil {
			if strings.TrimSpace(string(b)) != "50000" {
				t.Fatalf("quota %q", b)
			}
			return
		}
		if b, err := os.ReadFile(filepath.Join(d, "cpu.max")); err == nil {
			if strings.TrimSpace(string(b)) != "50000 100000" {
				t.Fatalf("cpu.max %q", b)
			}
			return
		}
	}
	t.Fatal("no cpu controller file found")
}

func TestKillAndCleanup(t *testing.T) {
	p, out := startSandbox(t, Spec{}, "sleepers")
	if line, _ := out.ReadString('\n'); strings.TrimSpace(line) != "ready" {
		t.Fatalf("child: %q", line)
	}
	// Host pids of everything in the sandbox: its pid namespace.
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", p.Pid))
	if err != nil {
		t.Fatal(err)
	}
	members := func() []int {
		var pids []int
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			n, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", n)); l == ns {
				stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", n))
				if i := bytes.LastIndexByte(stat, ')'); i > 0 && len(stat) > i+2 && stat[i+2] == 'Z' {
					continue // zombie awaiting reaping: already dead
				}
				pids = append(pids, n)
			}
		}
		return pids
	}
	// /proc may lag behind a just-forked child on a loaded machine: poll.
	var m []int
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if m = members(); len(m) == 6 {
			break
		}
	}
	if len(m) != 6 {
		st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Pid))
		t.Fatalf("expected init + 5 sleepers in the sandbox, found %v (init %d: %q)", m, p.Pid, st)
	}
	dirs := p.CgroupDirs()
	if os.Geteuid() == 0 && len(dirs) == 0 {
		t.Fatal("root run without cgroup")
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	info, _ := p.Wait()
	if info.Signal != syscall.SIGKILL {
		t.Fatalf("Wait: %v", info)
	}
	deadline := time.Now().Add(3 * time.Second)
	for len(members()) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("still alive after Kill: %v", members())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := p.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if err := p.Cleanup(); err != nil {
		t.Fatalf("second Cleanup: %v", err)
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("cgroup dir %s left behind", d)
		}
		if _, err := os.Stat(filepath.Dir(d)); err == nil {
			// Only other concurrent sandboxes could keep the group dir.
			t.Logf("note: %s still exists", filepath.Dir(d))
		}
	}
}

func TestLimitsNeedCgroup(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("as root the cgroup is always writable here")
	}
	_, err := Start(context.Background(), Spec{Args: []string{"isolate.test"}, Env: []string{"ISOLATE_TEST_MODE=exit7"}, MemoryBytes: 64 << 20})
	if err == nil || !strings.Contains(err.Error(), "cgroup") {
		t.Fatalf("want a cgroup error when a limit cannot be enforced, got %v", err)
	}
	t.Log(err)
}

func TestStartCost(t *testing.T) {
	const n = 10
	var total time.Duration
	var rss string
	for i := 0; i < n; i++ {
		t0 := time.Now()
		p, out := startSandbox(t, Spec{}, "idle")
		total += time.Since(t0)
		out.ReadString('\n')
		if i == 0 {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Pid))
			for line := range strings.Lines(string(b)) {
				if strings.HasPrefix(line, "VmRSS") {
					rss = strings.Join(strings.Fields(line), " ")
				}
			}
			for _, d := range p.CgroupDirs() {
				for _, f := range []string{"memory.usage_in_bytes", "memory.current"} {
					if b, err := os.ReadFile(filepath.Join(d, f)); err == nil {
						rss += fmt.Sprintf("; cgroup %s %s KiB", f, strconv.Itoa(atoi(string(b))/1024))
					}
				}
			}
		}
		p.Kill()
		p.Wait()
		p.Cleanup()
	}
	t.Logf("Start -> child ready: %.1f ms average over %d; init %s", float64(total.Microseconds())/1000/n, n, rss)
}

func TestStartErrors(t *testing.T) {
	if _, err := Start(context.Background(), Spec{Network: "bogus"}); err == nil {
		t.Fatal("bogus network accepted")
	}
	// A binary that never calls Child: Start must fail, not hang.
	_, err := Start(context.Background(), Spec{Path: "/bin/true"})
	if err == nil {
		t.Fatal("Start of a non-cooperating binary succeeded")
	}
	t.Log(err)
}

func atoi(s string) int { n, _ := strconv.Atoi(strings.TrimSpace(s)); return n }

func TestConcurrentSandboxes(t *testing.T) {
	const n = 4
	type res struct {
		info ExitInfo
		err  error
	}
	ch := make(chan res, n)
	for i := 0; i < n; i++ {
		go func() {
			p, err := Start(context.Background(), Spec{Args: []string{"isolate.test"}, Env: []string{"ISOLATE_TEST_MODE=exit7"}})
			if err == nil {
				started.Store(p.ID, true)
			}
			if err != nil {
				ch <- res{err: err}
				return
			}
			info, err := p.Wait()
			if cerr := p.Cleanup(); err == nil {
				err = cerr
			}
			ch <- res{info, err}
		}()
	}
	for i := 0; i < n; i++ {
		if r := <-ch; r.err != nil || r.info.ExitCode != 7 {
			t.Errorf("sandbox %d: %+v %v", i, r.info, r.err)
		}
	}
}
