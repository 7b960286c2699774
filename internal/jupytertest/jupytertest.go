// Package jupytertest starts a real Jupyter Server for tests: on
// 127.0.0.1, a random port and token, its own root, config, runtime and
// data directories.
package jupytertest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Server is a running Jupyter Server.
type Server struct {
	URL, Token string
	Root       string // its root directory on disk
}

// Python finds a python3 that has jupyter_server (Debian's
// python3-jupyter-server installs it for /usr/bin/python3).
func Python() string {
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		if exec.Command(p, "-c", "import jupyter_server, ipykernel").Run() == nil {
			return p
		}
	}
	return ""
}

// Launch starts a server with py (see Python); cleanup stops it and
// removes its directories.
func Launch(py string) (*Server, func(), error) {
	base, err := os.MkdirTemp("", "jupyter-test-")
	if err != nil {
		return nil, nil, err
	}
	root := filepath.Join(base, "root")
	for _, d := range []string{root, filepath.Join(base, "runtime"), filepath.Join(base, "config"), filepath.Join(base, "data")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, nil, err
		}
	}
	var tb [16]byte
	_, _ = rand.Read(tb[:])
	token := hex.EncodeToString(tb[:])
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	args := []string{"-m", "jupyter_server", "--no-browser", "--ServerApp.ip=127.0.0.1",
		fmt.Sprintf("--ServerApp.port=%d", port), "--ServerApp.port_retries=0",
		"--ServerApp.token=" + token, "--ServerApp.root_dir=" + root}
	if os.Geteuid() == 0 {
		args = append(args, "--allow-root") // CI runs as root
	}
	cmd := exec.Command(py, args...)
	// Its own config, runtime and data directories: nothing of the
	// machine's Jupyter setup leaks in, nothing of the tests' stays.
	cmd.Env = append(os.Environ(), "JUPYTER_RUNTIME_DIR="+filepath.Join(base, "runtime"),
		"JUPYTER_CONFIG_DIR="+filepath.Join(base, "config"), "JUPYTER_DATA_DIR="+filepath.Join(base, "data"),
		"HOME="+base, "PYTHONNOUSERSITE=1")
	logs := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	cleanup := func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		_ = os.RemoveAll(base)
	}
	s := &Server{URL: fmt.Sprintf("http://127.0.0.1:%d", port), Token: token, Root: root}
	deadline := time.Now().Add(90 * time.Second)
	for {
		if s.up() {
			return s, cleanup, nil
		}
		select {
		case <-exited:
			cleanup()
			return nil, nil, fmt.Errorf("jupyter server exited:\n%s", logs.String())
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cleanup()
			return nil, nil, fmt.Errorf("jupyter server not up in 90s:\n%s", logs.String())
		}
	}
}

// lockedBuffer keeps the server's first MiB of logs, for a failure.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() < 1<<20 {
		l.b.Write(p)
	}
	return len(p), nil
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (s *Server) up() bool {
	req, _ := http.NewRequest(http.MethodGet, s.URL+"/api/status", nil)
	req.Header.Set("Authorization", "token "+s.Token)
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
