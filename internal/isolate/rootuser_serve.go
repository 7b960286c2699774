//go:build linux

// The broker itself: hardening (stage 3), listening on RootSocket (stage 4)
// and serving requests to run a command or open a file as root.

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
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// rootStage3 hardens the broker as stage 1 hardens itself: in place (where
// chosen, ReexecEnv) on every thread, then it goes on as stage 4; else, or
// where it can't change every thread (cgo), on this one, then it
// re-executes (stage 4) so that every thread has the result. Never
// returns.
func rootStage3(cfg *childConfig) {
	runtime.LockOSThread()
	st := os.NewFile(uintptr(cfg.StatusFD), "status")
	fail := func(err error) {
		fmt.Fprintf(st, "error: %v\n", err)
		os.Exit(1)
	}
	unix.CloseOnExec(cfg.ExeFD)
	inPlace := wantInPlace()
	if inPlace {
		err := dropPrivileges(allThreads, false)
		if errors.Is(err, syscall.ENOTSUP) {
			// The first change already: nothing changed anywhere.
			inPlace = false
		} else if err != nil {
			fail(err)
		}
	}
	if !inPlace {
		if err := dropPrivileges(thisThread, false); err != nil {
			fail(err)
		}
	}
	if err := loadSeccomp(inPlace); err != nil {
		fail(err)
	}
	cfg.Stage = 4
	if inPlace {
		// What the exec would have closed: the binary's fd.
		unix.Close(cfg.ExeFD)
		rootStage4(cfg, st)
	}
	j, _ := json.Marshal(cfg)
	env := []string{envKey + "=" + string(j)}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envKey+"=") {
			env = append(env, kv)
		}
	}
	exe := "/proc/self/fd/" + strconv.Itoa(cfg.ExeFD)
	fail(fmt.Errorf("re-exec %s: %w", exe, unix.Exec(exe, []string{"code-sandboxes-root"}, env)))
}

// rootStage4 is the broker: it serves RootSocket until the sandbox ends.
// st is stage 3's *os.File of the status fd when it went on in place (one
// per image: another's finalizer would close the fd), nil after a re-exec.
func rootStage4(cfg *childConfig, st *os.File) {
	os.Unsetenv(envKey)
	if st == nil {
		st = os.NewFile(uintptr(cfg.StatusFD), "status")
	}
	if os.Getenv(gcAfterBrokerEnv) != "" {
		gcNow()
	}
	// Nothing of it for user code (root too) to read or rewrite.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		fmt.Fprintf(st, "error: dumpable: %v\n", err)
		os.Exit(1)
	}
	signal.Ignore(syscall.SIGHUP, syscall.SIGPIPE)
	if os.Getenv(brokerFailEnv) != "" {
		fmt.Fprintf(st, "error: failing as asked (%s)\n", brokerFailEnv)
		os.Exit(1)
	}
	if os.Getenv(slowBrokerEnv) != "" {
		time.Sleep(300 * time.Millisecond) // a busy host's broker (TestRootAvailableBeforeReady)
	}
	// Bound and made everyone's under another name, then renamed into
	// place: a client that finds the socket finds it listening (dialRoot
	// waits only while it is missing).
	tmp := RootSocket + ".new"
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: tmp, Net: "unixpacket"})
	if err == nil {
		ln.SetUnlinkOnClose(false)
		err = os.Chmod(tmp, 0o666)
	}
	if err == nil {
		err = os.Rename(tmp, RootSocket)
	}
	if err != nil {
		fmt.Fprintf(st, "error: listen: %v\n", err)
		os.Exit(1)
	}
	st.Write([]byte("ready\n"))
	st.Close()
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				os.Exit(1)
			}
			time.Sleep(10 * time.Millisecond) // EMFILE and the like
			continue
		}
		go serveRoot(c)
	}
}

// serveRoot starts one command as root for a client and reports its end.
func serveRoot(c *net.UnixConn) {
	defer c.Close()
	buf := make([]byte, maxRootRequest)
	oob := make([]byte, unix.CmsgSpace(3*4))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	c.SetReadDeadline(time.Time{})
	if err != nil {
		return
	}
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for i := range msgs {
			fds, err := unix.ParseUnixRights(&msgs[i])
			if err != nil {
				continue
			}
			for _, fd := range fds {
				files = append(files, os.NewFile(uintptr(fd), "stdio"))
			}
		}
	}
	reply := func(s string) { c.Write([]byte(s)) }
	var req rootRequest
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) == 0 && json.Unmarshal(buf[:n], &req) == nil && req.Op == "open" && len(files) == 0 {
		serveRootOpen(c, req)
		return
	}
	switch {
	case flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0:
		reply("error request too large")
		return
	case req.Op != "":
		reply("error unknown operation")
		return
	case len(files) != 3:
		reply(fmt.Sprintf("error want stdin, stdout and stderr, got %d descriptors", len(files)))
		return
	case json.Unmarshal(buf[:n], &req) != nil || !filepath.IsAbs(req.Path) || len(req.Args) == 0:
		reply("error malformed request")
		return
	}
	cmd := &exec.Cmd{
		Path: req.Path, Args: req.Args, Env: req.Env, Dir: req.Dir,
		Stdin: files[0], Stdout: files[1], Stderr: files[2],
		// Its own process group, so that the client going away takes
		// everything it started with it.
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	if err := cmd.Start(); err != nil {
		reply("error " + err.Error())
		return
	}
	for _, f := range files {
		f.Close()
	}
	files = nil
	pid := cmd.Process.Pid
	reply("started " + strconv.Itoa(pid))
	done := make(chan struct{})
	go func() {
		b := make([]byte, 64)
		for {
			n, err := c.Read(b)
			if err != nil || n == 0 {
				select {
				case <-done:
				default:
					// The client is gone (killed): so is what it ran.
					syscall.Kill(-pid, syscall.SIGKILL)
				}
				return
			}
			if s, ok := strings.CutPrefix(string(b[:n]), "signal "); ok {
				if sig, err := strconv.Atoi(s); err == nil && sig > 0 && sig < 65 {
					syscall.Kill(pid, syscall.Signal(sig))
				}
			}
		}
	}()
	cmd.Wait()
	close(done)
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		reply("signal " + strconv.Itoa(int(ws.Signal())))
	} else {
		reply("exit " + strconv.Itoa(ws.ExitStatus()))
	}
}

// serveRootOpen opens a file as root and sends its fd back ("ok" with the
// fd, or "errno <n> <text>").
func serveRootOpen(c *net.UnixConn, req rootRequest) {
	fail := func(err error) {
		var errno syscall.Errno
		if !errors.As(err, &errno) {
			errno = syscall.EIO
		}
		c.Write([]byte(fmt.Sprintf("errno %d %v", int(errno), err)))
	}
	if !filepath.IsAbs(req.Path) {
		fail(syscall.EINVAL)
		return
	}
	if req.Mkdir {
		if err := os.MkdirAll(filepath.Dir(req.Path), 0o755); err != nil {
			fail(err)
			return
		}
	}
	fd, err := unix.Open(req.Path, req.Flags|unix.O_CLOEXEC|unix.O_NOCTTY, req.Perm&0o7777)
	if err != nil {
		fail(err)
		return
	}
	defer unix.Close(fd)
	c.WriteMsgUnix([]byte("ok"), unix.UnixRights(fd), nil)
}
