package docker

// Network all and allowlist on the docker variant: the container starts
// with the engine's network mode "none" (its own namespace, loopback only),
// and a small supervisor process of ours, on the host, gives that namespace
// the same TUN device and user-space stack as a local sandbox
// (internal/egress): the policy is enforced outside the container, by the
// supervisor, whatever the engine's bridge and iptables would allow. (The
// default bridge reaches the host's docker0 address and with it every
// service listening on 0.0.0.0, plus private ranges and cloud metadata.)
//
// It needs root (joining the container's namespace) and the engine on this
// machine (the container's init pid is a pid here); otherwise these
// policies are refused with the reason.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/egress"
	"github.com/code-sandboxes/code-sandboxes/internal/isolate"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

const (
	roleNetwork    = "docker-network"
	netSpecEnv     = "CODE_SANDBOXES_NET_SPEC"
	dnsEnv         = "CODE_SANDBOXES_DNS" // as the local variant's
	netLogFile     = "network.log"
	maxNetLog      = 1 << 20
	netStartupWait = 30 * time.Second
	// In the sandbox's host-side directory: the supervisor's pid, and the
	// policy UpdateNetwork asks it (SIGUSR1) to switch to.
	netPidFile    = "network.pid"
	netPolicyFile = "network.json"
)

type netSpec struct {
	Pid    int           `json:"pid"`
	Dir    string        `json:"dir"`
	Policy egress.Policy `json:"policy"`
}

// checkNetworked refuses network all/allowlist where the supervisor can't
// work, and validates the policy.
func checkNetworked(spec driver.Spec) error {
	if _, err := egress.Compile(egress.PolicyOf(spec.Network, spec.AllowedHosts, spec.DeniedHosts, spec.AllowPrivate)); err != nil {
		return fmt.Errorf("%w: %w", sberr.ErrInvalidConfig, err)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: network %s on the docker variant needs root (the sandbox's network is attached from the host, inside the container's namespace, so that it never reaches the host, its docker0 address or cloud metadata); run as root, or use the local variant, which does it without root", sberr.ErrNotSupported, spec.Network)
	}
	opts, err := optionsOf(spec)
	if err != nil {
		return err
	}
	if rt, _ := runtimeFor(spec, opts); rt != "" {
		return fmt.Errorf("%w: network %s with runtime %q: a runtime with a network stack of its own does not see the network attached from the host; use network none with that runtime (or isolation gvisor on the local variant, which keeps network all and allowlist)", sberr.ErrNotSupported, spec.Network, rt)
	}
	return nil
}

// startNetwork starts the sandbox's network supervisor for the container
// whose init is pid and returns once the network is up.
func startNetwork(ctx context.Context, dir string, pid int, spec driver.Spec) error {
	if pid <= 0 {
		return fmt.Errorf("%w: the engine gave no process id for the container; network %s needs the engine on this machine", sberr.ErrNotSupported, spec.Network)
	}
	b, _ := json.Marshal(netSpec{Pid: pid, Dir: dir,
		Policy: egress.PolicyOf(spec.Network, spec.AllowedHosts, spec.DeniedHosts, spec.AllowPrivate)})
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	cmd := exec.Command(exe)
	cmd.Args = []string{"code-sandboxes-network", filepath.Base(dir)}
	cmd.Env = []string{roleEnv + "=" + roleNetwork, netSpecEnv + "=" + string(b)}
	if v, ok := os.LookupEnv(dnsEnv); ok {
		cmd.Env = append(cmd.Env, dnsEnv+"="+v)
	}
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return fmt.Errorf("start the sandbox's network supervisor: %w", err)
	}
	w.Close()
	go func() { _ = cmd.Wait() }() // it outlives us; reap it if it ends while we run
	type res struct {
		line string
		err  error
	}
	ch := make(chan res, 1)
	go func() {
		l, err := bufio.NewReader(io.LimitReader(r, 4096)).ReadString('\n')
		ch <- res{strings.TrimSpace(l), err}
	}()
	select {
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		return ctx.Err()
	case <-time.After(netStartupWait):
		_ = cmd.Process.Kill()
		return fmt.Errorf("%w: the sandbox's network supervisor did not start in %s", sberr.ErrUnavailable, netStartupWait)
	case x := <-ch:
		if x.line == "ok" {
			return nil
		}
		_ = cmd.Process.Kill()
		if msg, ok := strings.CutPrefix(x.line, "error: "); ok {
			return fmt.Errorf("the sandbox's network: %s", msg)
		}
		return fmt.Errorf("the sandbox's network supervisor exited without reporting: %v", x.err)
	}
}

// runNetwork is the supervisor: attach, serve, and end with the container.
func runNetwork() int {
	ready := os.NewFile(3, "ready")
	report := func(s string) {
		if ready != nil {
			_, _ = io.WriteString(ready, s+"\n")
			ready.Close()
			ready = nil
		}
	}
	var spec netSpec
	if err := json.Unmarshal([]byte(os.Getenv(netSpecEnv)), &spec); err != nil {
		report("error: bad spec: " + err.Error())
		return 2
	}
	// Held from before the attach: if the container's init is gone (and
	// its pid reused) by the time we join its namespace, the pidfd says so.
	pfd, err := pidfdOpen(spec.Pid)
	if err != nil {
		report(fmt.Sprintf("error: the container's init (pid %d): %v", spec.Pid, err))
		return 1
	}
	tun, err := isolate.AttachTUN(spec.Pid)
	if err != nil {
		report("error: " + err.Error())
		return 1
	}
	if exited(pfd) {
		tun.Close()
		report("error: the container ended during start-up")
		return 1
	}
	lf, err := os.OpenFile(filepath.Join(spec.Dir, netLogFile), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		tun.Close()
		report("error: " + err.Error())
		return 1
	}
	defer lf.Close()
	logger := log.New(&egress.CappedWriter{W: lf, Left: maxNetLog}, "", log.LstdFlags)
	var dns []string
	if v := os.Getenv(dnsEnv); v != "" {
		dns = strings.Split(v, ",")
	}
	st, err := egress.Start(tun, spec.Policy, egress.Options{DNS: dns, Logf: logger.Printf})
	if err != nil {
		report("error: " + err.Error())
		return 1
	}
	defer st.Close()
	if err := os.WriteFile(filepath.Join(spec.Dir, netPidFile), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		report("error: " + err.Error())
		return 1
	}
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	go func() {
		for range usr1 {
			var p egress.Policy
			b, err := os.ReadFile(filepath.Join(spec.Dir, netPolicyFile))
			if err == nil {
				err = json.Unmarshal(b, &p)
			}
			if err == nil {
				err = st.SetPolicy(p)
			}
			if err != nil {
				st.Logf("egress: policy update refused: %v", err)
				_ = egress.WriteApplied(spec.Dir, "error: "+err.Error())
				continue
			}
			_ = egress.WriteApplied(spec.Dir, egress.Digest(p))
		}
	}()
	report("ok")
	devnull, _ := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if devnull != nil {
		_ = syscall.Dup2(int(devnull.Fd()), 0)
		_ = syscall.Dup2(int(devnull.Fd()), 1)
		_ = syscall.Dup2(int(devnull.Fd()), 2)
	}
	// Until the container's init exits (a pidfd becomes readable then).
	for {
		fds := []unix.PollFd{{Fd: int32(pfd), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err != nil && !errors.Is(err, unix.EINTR) {
			return 1
		}
		if exited(pfd) {
			return 0
		}
	}
}

// updateNetwork is UpdateNetwork for a docker sandbox (see the local
// variant's): the new policy in the directory, SIGUSR1 to the supervisor.
func updateNetwork(ctx context.Context, dir, id, created string, np driver.NetworkPolicy) error {
	if (created == "none") != (np.Network == "none") {
		return fmt.Errorf("%w: sandbox %s was created with network %s; a running sandbox can switch between all and allowlist only (create a new one)", sberr.ErrNotSupported, id, created)
	}
	if np.Network == "none" {
		return nil
	}
	p := egress.PolicyOf(np.Network, np.AllowedHosts, np.DeniedHosts, np.AllowPrivate)
	if _, err := egress.Compile(p); err != nil {
		return fmt.Errorf("%w: %w", sberr.ErrInvalidConfig, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, netPidFile))
	if err != nil {
		return fmt.Errorf("%w: sandbox %s: its network supervisor is gone: %w", sberr.ErrUnavailable, id, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return fmt.Errorf("%w: sandbox %s: bad %s", sberr.ErrUnavailable, id, netPidFile)
	}
	// Only our supervisor of this sandbox gets the signal, never a process
	// that reused its pid.
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if !bytes.Equal(cmdline, []byte("code-sandboxes-network\x00"+filepath.Base(dir)+"\x00")) {
		return fmt.Errorf("%w: sandbox %s: its network supervisor is gone", sberr.ErrUnavailable, id)
	}
	if err := writeFileAtomic(filepath.Join(dir, netPolicyFile), p); err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGUSR1); err != nil {
		return err
	}
	// Return once the policy is in force, not merely asked for.
	if err := egress.WaitApplied(ctx, dir, p); err != nil {
		return fmt.Errorf("%w: sandbox %s: %w", sberr.ErrUnavailable, id, err)
	}
	return nil
}

func exited(pfd int) bool {
	fds := []unix.PollFd{{Fd: int32(pfd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0
}
