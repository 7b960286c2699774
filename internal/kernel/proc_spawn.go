// Starting a kernel process: finding Python, its arguments, spawning it and
// how it exited.

package kernel

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/code-sandboxes/code-sandboxes/internal/cpupin"
	"github.com/code-sandboxes/code-sandboxes/internal/pidwait"
	"github.com/code-sandboxes/code-sandboxes/internal/procstat"
	"github.com/code-sandboxes/code-sandboxes/internal/trace"
)

// resolvePython finds the interpreter: an explicit path, a bare name looked up
// in the PATH of env, or python3 from that PATH falling back to /usr/bin/python3.
func resolvePython(python string, env []string) (string, error) {
	name := python
	if name == "" {
		name = "python3"
	}
	if strings.Contains(name, "/") {
		if err := checkExecutable(name); err != nil {
			return "", fmt.Errorf("%w: %s: %v", ErrPythonNotFound, name, err)
		}
		return name, nil
	}
	path := os.Getenv("PATH")
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	var tried []string
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if checkExecutable(p) == nil {
			return p, nil
		}
		tried = append(tried, p)
	}
	if python == "" {
		const fallback = "/usr/bin/python3"
		if checkExecutable(fallback) == nil {
			return fallback, nil
		}
		tried = append(tried, fallback)
	}
	return "", fmt.Errorf("%w: %q is not in PATH (tried %s)", ErrPythonNotFound, name, strings.Join(tried, ", "))
}

func checkExecutable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("not an executable file")
	}
	return nil
}

var scriptOnce sync.Map // dir -> error

// kernelArgs returns the interpreter arguments. The kernel is written once to
// a cache directory and imported from there so Python caches its bytecode
// (compiling the source on every start costs more than the rest of startup;
// the cache is written even under PYTHONDONTWRITEBYTECODE, for our file only);
// when no directory is writable it is passed with -c instead.
func kernelArgs(dir string) []string {
	dir = resolveScriptDir(dir)
	if dir != "" && !strings.ContainsAny(dir, "'\\\n") {
		v, _ := scriptOnce.LoadOrStore(dir, sync.OnceValue(func() error {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			p := filepath.Join(dir, kernelModule()+".py")
			if b, err := os.ReadFile(p); err == nil && isKernelSource(b) {
				return nil
			}
			tmp, err := os.CreateTemp(dir, ".kernel-*")
			if err != nil {
				return err
			}
			_, err = io.Copy(tmp, kernelReader())
			if cerr := tmp.Close(); err == nil {
				err = cerr
			}
			if err == nil {
				err = os.Chmod(tmp.Name(), 0o644)
			}
			if err == nil {
				err = os.Rename(tmp.Name(), p)
			}
			if err != nil {
				os.Remove(tmp.Name())
			}
			return err
		}))
		if v.(func() error)() == nil {
			return []string{"-c", fmt.Sprintf(
				"import sys;w=sys.dont_write_bytecode;sys.dont_write_bytecode=False;sys.path.insert(0,'%s');"+
					"import %s as k;del sys.path[0];sys.dont_write_bytecode=w;del w;k._main()", dir, kernelModule())}
		}
	}
	return []string{"-c", kernelSource() + "\n_main()\n"}
}

// spawned is a kernel process started and not yet spoken to: the parent's
// ends of its pipes.
type spawned struct {
	proc                   kernelProc
	pid                    int
	outR, errR, cmdW, evtR *os.File
	markW                  [2]int // kproc.markW
}

// kernelProc is a kernel's process: one started here (os/exec), or one
// adopted after an exec (AdoptEarly).
type kernelProc interface {
	// kill SIGKILLs the process itself (not by pid: no reuse race).
	kill() error
	// wait reaps it: nil for exit status 0, else an error describeExit
	// reads (*exec.ExitError, exitStatus).
	wait() error
}

// osProc is a kernel started here.
type osProc struct{ p *os.Process }

func (o osProc) kill() error { return o.p.Kill() }

// wait reaps the process as exec.Cmd.Wait would: an *exec.ExitError
// unless it exited with status 0.
func (o osProc) wait() error {
	// A kernel lives as long as its sandbox: wait on the poller, not
	// with a thread blocked in waitid (pidwait).
	pidwait.Exited(o.p.Pid)
	st, err := o.p.Wait()
	if err != nil {
		return err
	}
	if !st.Success() {
		return &exec.ExitError{ProcessState: st}
	}
	return nil
}

// exitStatus is how an adopted kernel ended, other than with status 0.
type exitStatus syscall.WaitStatus

func (e exitStatus) Error() string {
	ws := syscall.WaitStatus(e)
	if ws.Signaled() {
		return "signal: " + ws.Signal().String()
	}
	return "exit status " + strconv.Itoa(ws.ExitStatus())
}

// spawn starts a kernel process with o (python resolved in o's PATH, cwd
// checked) and closes the child's ends of its pipes here.
func spawn(o *Options) (*spawned, error) {
	python, err := resolvePython(o.Python, o.env())
	if err != nil {
		return nil, err
	}
	if o.Cwd != "" {
		if st, err := os.Stat(o.Cwd); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("kernel: working directory %q is not a directory: %v", o.Cwd, err)
		}
	}
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	mk := os.Pipe
	pipe := func() (r, w *os.File, err error) {
		r, w, err = mk()
		if err == nil {
			files = append(files, r, w)
		}
		return
	}
	outR, outW, err := pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := pipe()
	if err != nil {
		closeAll()
		return nil, err
	}
	if o.ProtocolPipe != nil {
		mk = o.ProtocolPipe
	}
	cmdR, cmdW, err := pipe()
	if err != nil {
		closeAll()
		return nil, err
	}
	evtR, evtW, err := pipe()
	if err != nil {
		closeAll()
		return nil, err
	}
	for _, f := range []*os.File{outW, errW, evtW} {
		setPipeSize(f)
	}
	// After setPipeSize: the child's ends must stay blocking, and these
	// are open file descriptions of their own, non-blocking.
	markW := reopenWriteFDs(int(outW.Fd()), int(errW.Fd()))
	closeMarkW := func() {
		for _, fd := range markW {
			if fd >= 0 {
				syscall.Close(fd)
			}
		}
	}
	attr := &syscall.SysProcAttr{}
	if o.SysProcAttr != nil {
		a := *o.SysProcAttr
		attr = &a
	}
	// Own process group: Interrupt and kill reach the kernel's children too.
	attr.Setpgid = true
	attr.Pgid = 0
	setDeathSignal(attr)
	cmd := &exec.Cmd{
		Path:        python,
		Args:        append([]string{python}, kernelArgs(o.ScriptDir)...),
		Env:         o.env(),
		Dir:         o.Cwd,
		Stdout:      outW,
		Stderr:      errW,
		ExtraFiles:  []*os.File{cmdR, evtW}, // fd 3, fd 4
		SysProcAttr: attr,
	}
	// With the agent's full CPU set, not the CPU it is pinned to.
	if err := cpupin.Start(cmd); err != nil {
		closeAll()
		closeMarkW()
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission) {
			return nil, fmt.Errorf("%w: %s: %v", ErrPythonNotFound, python, err)
		}
		return nil, fmt.Errorf("kernel: starting %s: %w", python, err)
	}
	trace.Mark("kernel: spawned")
	// Under a memory limit the kernel, not the agent, is the OOM victim.
	_ = procstat.SetOOMScoreAdj(cmd.Process.Pid, procstat.OOMScoreUserCode)
	outW.Close()
	errW.Close()
	cmdR.Close()
	evtW.Close()
	return &spawned{proc: osProc{cmd.Process}, pid: cmd.Process.Pid, outR: outR, errR: errR, cmdW: cmdW, evtR: evtR, markW: markW}, nil
}

// startKernel starts a kernel process (or takes o.Early's) and the
// goroutines that read it.
func startKernel(o *Options) (*kproc, error) {
	sp := o.Early.take()
	if sp == nil {
		var err error
		if sp, err = spawn(o); err != nil {
			return nil, err
		}
	}
	tok := make([]byte, 16)
	rand.Read(tok)
	token := []byte(hex.EncodeToString(tok))
	k := &kproc{
		proc: sp.proc, pid: sp.pid, cmdW: sp.cmdW, outR: sp.outR, errR: sp.errR, evtR: sp.evtR, token: token, markW: sp.markW,
		exited: make(chan struct{}), done: make(chan struct{}), killed: make(chan struct{}),
	}
	goMarks := "0"
	if k.marksFinal() {
		goMarks = "1"
	}
	// The kernel waits for commands on the agent's CPU (cpupin; -1: it
	// doesn't pin), and runs user code on the agent's set from before it
	// pinned itself: an early kernel started away from the agent's CPU
	// (cpupin.Away) takes that set back ("": leave the set as it is).
	cpu := strconv.Itoa(cpupin.CPU())
	// The hello frame fits in the pipe buffer: no need to wait for Python.
	k.write(encodeCommand([]byte("hello"), token, []byte(strconv.Itoa(o.maxEvent())), []byte(strconv.Itoa(o.maxEvent()+frameSlack)), []byte(o.language()), []byte(goMarks), []byte(cpu), []byte(cpupin.Full())))
	go func() {
		k.waitErr = sp.proc.wait()
		close(k.exited)
	}()
	outCh := make(chan pipeItem, 8)
	errCh := make(chan pipeItem, 8)
	frCh := make(chan frameItem, 2)
	go readPipe(sp.outR, token, outCh)
	go readPipe(sp.errR, token, errCh)
	go readFrames(sp.evtR, o.maxEvent()+frameSlack, frCh)
	go k.pump(outCh, errCh, frCh)
	return k, nil
}
