//go:build linux

package docker

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/moby/moby/api/types/container"
	"golang.org/x/sys/unix"

	"github.com/code-sandboxes/code-sandboxes/internal/isolate"
)

const dropChildEnv = "CS_DOCKER_TEST_DROP_CHILD"

// TestAgentDropsEverything: what the agent does before serving, run in a
// child process started as root with every capability (more than a
// container grants): afterwards every thread, and every process it starts,
// is uid 1000 with all five capability sets empty (the bounding set too:
// the hostile suite found CapBnd 0xc0 in containers) and runs under the
// local variant's seccomp filter (io_uring refused: the suite found it
// allowed by Docker 20.10's profile).
func TestAgentDropsEverything(t *testing.T) {
	if os.Getenv(dropChildEnv) == "1" {
		if err := dropChild(); err != nil {
			fmt.Println("FAIL:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	requireRoot(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestAgentDropsEverything$", "-test.count=1")
	cmd.Env = append(os.Environ(), dropChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	want := "uid 1000 gid 100\nCapInh: 0000000000000000\nCapPrm: 0000000000000000\nCapEff: 0000000000000000\nCapBnd: 0000000000000000\nCapAmb: 0000000000000000\nNoNewPrivs: 1\nSeccomp: 2\n"
	if string(out) != want {
		t.Errorf("a process the agent started:\n%s\nwant:\n%s", out, want)
	}
}

func dropChild() error {
	if err := dropPrivileges(sandboxUID, sandboxGID); err != nil {
		return err
	}
	if err := isolate.LoadSeccompAllThreads(); err != nil {
		return err
	}
	if _, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, 0, 0); errno != unix.ENOSYS {
		return fmt.Errorf("io_uring_setup: %v, want ENOSYS", errno)
	}
	// What user code would see: a process the agent starts.
	sh := exec.Command("/bin/sh", "-c", `echo uid $(id -u) gid $(id -g); grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp):' /proc/self/status | tr -s '\t' ' '`)
	out, err := sh.CombinedOutput()
	if err != nil {
		return fmt.Errorf("sh: %v: %s", err, out)
	}
	fmt.Print(string(out))
	return nil
}

// TestHostConfigHardening: the container settings the agent's hardening
// relies on.
func TestHostConfigHardening(t *testing.T) {
	hc := hostConfig(launchSpec{dir: t.TempDir(), agentPath: "/bin/true", mode: "none"})
	for _, c := range []string{"CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP"} {
		if !slices.Contains(hc.CapAdd, c) {
			t.Errorf("CapAdd %v lacks %s", hc.CapAdd, c)
		}
	}
	if !slices.Equal(hc.CapDrop, []string{"ALL"}) || !slices.Contains(hc.SecurityOpt, "no-new-privileges") {
		t.Errorf("CapDrop %v SecurityOpt %v", hc.CapDrop, hc.SecurityOpt)
	}
	if hc.CgroupnsMode != container.CgroupnsModePrivate {
		t.Errorf("CgroupnsMode %q, want private", hc.CgroupnsMode)
	}
	if !strings.Contains(hc.Tmpfs["/tmp"], "nosuid") {
		t.Errorf("/tmp options %q", hc.Tmpfs["/tmp"])
	}
	for _, m := range []string{"/tmp", "/home/user", "/files", "/dev/shm"} {
		if !strings.Contains(hc.Tmpfs[m], "nr_inodes=") {
			t.Errorf("%s: no inode bound: %q", m, hc.Tmpfs[m])
		}
	}
}
