//go:build linux

// The broker's clients: sudo, and RootOpen.

package isolate

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/code-sandboxes/code-sandboxes/internal/procstat"
)

// dialRoot connects to the root broker. The broker may still be held
// (ChildAsync holds it until root is first asked for) or starting: its socket appears, by a rename, only once it listens. A
// missing socket releases the broker (stage 2, its holder, then waits for
// its status; any other process of the sandbox's user may signal it too:
// that user owns root's user namespace) and is waited for, up to
// brokerStartTimeout; any other error is final.
func dialRoot() (*net.UnixConn, error) {
	if err := awaitRootBroker(); err != nil {
		return nil, fmt.Errorf("the sandbox's root user is not available: %w", err)
	}
	addr := &net.UnixAddr{Name: RootSocket, Net: "unixpacket"}
	deadline := time.Now().Add(brokerStartTimeout)
	released := false
	pid := 0
	for delay := time.Millisecond; ; delay = min(2*delay, 20*time.Millisecond) {
		c, err := net.DialUnix("unixpacket", nil, addr)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, syscall.ENOENT) {
			return nil, fmt.Errorf("the sandbox's root broker: %w", err)
		}
		if !released {
			released = true
			// Best effort: a pid that isn't the held broker (root may
			// rewrite the file) gets a SIGCONT, which only continues a
			// stopped process of the user's own.
			if pid = readBrokerPid(); pid > 1 {
				_ = unix.Kill(pid, unix.SIGCONT)
			}
		} else if pid > 1 && procstat.Ended(pid, 0) {
			// It exited without listening: no use waiting (its
			// /proc/PID/stat, which anyone may read, says so). A reused
			// pid only makes this wait the whole timeout.
			return nil, fmt.Errorf("the sandbox's root broker exited before it listened (the sandbox's log says why)")
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the sandbox's root broker is not listening after %v (it failed to start or was removed; the sandbox's log says why): %w", brokerStartTimeout, err)
		}
		time.Sleep(delay)
	}
}

// RootOpen opens path as the sandbox's root (through its broker): flags
// and perm as open(2)'s; mkdir creates the parent directories first, as
// root. Errors carry the errno (fs.ErrNotExist, fs.ErrPermission… match).
func RootOpen(path string, flags int, perm os.FileMode, mkdir bool) (*os.File, error) {
	req, _ := json.Marshal(rootRequest{Op: "open", Path: path, Flags: flags, Perm: uint32(perm.Perm()), Mkdir: mkdir})
	c, err := dialRoot()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write(req); err != nil {
		return nil, fmt.Errorf("the sandbox's root broker: %w", err)
	}
	b := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := c.ReadMsgUnix(b, oob)
	if err != nil {
		return nil, fmt.Errorf("the sandbox's root broker: %w", err)
	}
	if rest, ok := strings.CutPrefix(string(b[:n]), "errno "); ok {
		num, _, _ := strings.Cut(rest, " ")
		e, _ := strconv.Atoi(num)
		return nil, &os.PathError{Op: "open", Path: path, Err: syscall.Errno(e)}
	}
	fds, err := receivedFDs(oob[:oobn], 1)
	if err != nil || string(b[:n]) != "ok" {
		return nil, fmt.Errorf("the sandbox's root broker: unexpected answer %q (%v)", b[:n], err)
	}
	return os.NewFile(uintptr(fds[0]), path), nil
}

// IsSudo reports whether this process is the sandbox's sudo: the binary run
// by the name sudo where a root broker listens. Call it first thing in main.
func IsSudo() bool {
	if filepath.Base(os.Args[0]) != "sudo" || IsChild() {
		return false
	}
	if RootAvailable() {
		return true
	}
	// The broker's socket gone (root may remove it): still the sandbox's
	// sudo when run from SudoPath, which then says the broker is gone
	// rather than run the program's own main.
	exe, err := os.Executable()
	return err == nil && exe == SudoPath
}

// Sudo runs its arguments as the sandbox's root through the broker and
// returns the exit status to exit with. It understands the options scripts
// pass to sudo (-u root, -E, -H, -n, -S, -k, -i, -s, --).
func Sudo() int {
	args := os.Args[1:]
	shell, chdir := false, ""
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "sudo: "+format+"\n", a...)
		return 1
	}
options:
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		a := args[0]
		args = args[1:]
		switch a {
		case "--":
			break options
		case "-u", "--user":
			if len(args) == 0 {
				return fail("option -u needs a user")
			}
			if u := args[0]; u != "root" && u != "0" && u != "#0" {
				return fail("only root is available here (asked for %q); run as the sandbox's user without sudo", u)
			}
			args = args[1:]
		case "-D", "--chdir":
			if len(args) == 0 {
				return fail("option -D needs a directory")
			}
			chdir = args[0]
			args = args[1:]
		case "-E", "-H", "-n", "-S", "-k", "-P", "--preserve-env", "--non-interactive", "--set-home":
		case "-i", "-s", "--login", "--shell":
			shell = true
		case "-v", "--validate":
			return 0
		default:
			if strings.HasPrefix(a, "--preserve-env=") {
				continue
			}
			return fail("option %s is not supported here (root in this sandbox: -u root, -E, -H, -n, -S, -k, -i, -s)", a)
		}
	}
	if shell {
		sh := "/bin/bash"
		if _, err := os.Stat(sh); err != nil {
			sh = "/bin/sh"
		}
		if len(args) == 0 {
			args = []string{sh, "-l"}
		} else {
			args = []string{sh, "-c", strings.Join(args, " ")}
		}
	}
	if len(args) == 0 {
		return fail("usage: sudo [-u root] [-E] [-i|-s] command [args...]")
	}
	if os.Getenv("PATH") == "" {
		os.Setenv("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin") // sudo's secure_path
	}
	path, err := exec.LookPath(args[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "sudo: %s: command not found\n", args[0])
		return 1
	}
	if path, err = filepath.Abs(path); err != nil {
		return fail("%v", err)
	}
	dir, _ := os.Getwd()
	if chdir != "" {
		dir = chdir // the broker changes to it, as root
	}
	env := []string{"HOME=" + RootHome, "USER=root", "LOGNAME=root", "SUDO_USER=" + os.Getenv("USER"),
		"SUDO_UID=" + strconv.Itoa(os.Getuid()), "SUDO_GID=" + strconv.Itoa(os.Getgid())}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "HOME", "USER", "LOGNAME", "SUDO_USER", "SUDO_UID", "SUDO_GID":
		default:
			env = append(env, kv)
		}
	}
	req, _ := json.Marshal(rootRequest{Path: path, Args: args, Env: env, Dir: dir})
	if len(req) > maxRootRequest {
		return fail("arguments and environment too long (over %d bytes)", maxRootRequest)
	}
	c, err := dialRoot()
	if err != nil {
		return fail("%v", err)
	}
	defer c.Close()
	// Signals first, so that none sent once the command runs is lost.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH, syscall.SIGCONT, syscall.SIGALRM)
	if _, _, err := c.WriteMsgUnix(req, unix.UnixRights(0, 1, 2), nil); err != nil {
		return fail("the sandbox's root broker: %v", err)
	}
	b := make([]byte, 4096)
	n, err := c.Read(b)
	if err != nil {
		return fail("the sandbox's root broker: %v", err)
	}
	if msg, ok := strings.CutPrefix(string(b[:n]), "error "); ok {
		return fail("%s", msg)
	}
	go func() {
		for s := range sigs {
			c.Write([]byte("signal " + strconv.Itoa(int(s.(syscall.Signal)))))
		}
	}()
	n, err = c.Read(b)
	if err != nil {
		return fail("the sandbox's root broker went away: %v", err)
	}
	res := string(b[:n])
	if s, ok := strings.CutPrefix(res, "exit "); ok {
		code, _ := strconv.Atoi(s)
		return code
	}
	if s, ok := strings.CutPrefix(res, "signal "); ok {
		sig, _ := strconv.Atoi(s)
		// End as the command did, by the same signal (its default action
		// once ours is reset); the exit status is the fallback for one
		// that doesn't end a process.
		signal.Reset(syscall.Signal(sig))
		syscall.Kill(os.Getpid(), syscall.Signal(sig))
		time.Sleep(time.Second)
		return 128 + sig
	}
	return fail("unexpected answer %q", res)
}
