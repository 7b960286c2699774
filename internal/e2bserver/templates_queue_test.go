package e2bserver

import (
	"encoding/json"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// startOwnServer is testServer with the stop in the test's hands.
func startOwnServer(t *testing.T, o Options) (*Server, string, func() error) {
	t.Helper()
	if len(o.APIKeys) == 0 && len(o.Keys) == 0 {
		o.APIKeys = []string{testKey}
	}
	setRuntimeDir(&o.Config, t.TempDir())
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	url, stop, err := s.StartLoopback(false)
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	var stopErr error
	stopOnce := func() error { once.Do(func() { stopErr = stop() }); return stopErr }
	t.Cleanup(func() { _ = stopOnce() })
	return s, url, stopOnce
}

// buildState is a build's status and reason as the server holds them.
func buildState(s *Server, team, tplID, buildID string) (string, string) {
	t := s.templates
	t.mu.Lock()
	defer t.mu.Unlock()
	tp := t.find(team, tplID)
	if tp == nil || tp.build(buildID) == nil {
		return "", ""
	}
	b := tp.build(buildID)
	return b.Status, b.Reason
}

// checkShutdownLeftNothing: after the shutdown the build says it was
// cancelled by it (in memory and in templates.json), the queue's
// goroutine ended, and no work dir of a build is left in the store.
func checkShutdownLeftNothing(t *testing.T, s *Server, team, tplID, buildID string, before map[string]bool) {
	t.Helper()
	if st, reason := buildState(s, team, tplID, buildID); st != "error" || !strings.Contains(reason, "server shut down") {
		t.Errorf("after the shutdown the build is %q (%s), want an error saying the server shut down", st, reason)
	}
	raw, err := os.ReadFile(filepath.Join(s.templates.teamDir(team), "templates.json"))
	if err != nil || !strings.Contains(string(raw), "server shut down") {
		t.Errorf("templates.json does not record the cancellation: %v", err)
	}
	select {
	case <-s.templates.workerDone:
	default:
		t.Error("the build queue's goroutine is still running after the shutdown")
	}
	tmp := filepath.Join(s.templates.store.Dir, "tmp")
	ents, _ := os.ReadDir(tmp)
	for _, e := range ents {
		if e.IsDir() && !before[e.Name()] {
			t.Errorf("the build's work dir %s is left in the store", e.Name())
		}
	}
	// The jail's idmapped view of the rootfs is a mount in the work dir.
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(mi), "\n") {
			for name := range tmpDirsSince(tmp, before) {
				if strings.Contains(line, filepath.Join(tmp, name)) {
					t.Errorf("a mount of the build is left: %s", line)
				}
			}
		}
	}
}

// tmpDirsSince is every entry of tmp not in before (left mounts' dirs
// may be gone from the listing yet mounted).
func tmpDirsSince(tmp string, before map[string]bool) map[string]bool {
	m := map[string]bool{}
	ents, _ := os.ReadDir(tmp)
	for _, e := range ents {
		if !before[e.Name()] {
			m[e.Name()] = true
		}
	}
	return m
}

func tmpDirs(s *Server) map[string]bool {
	m := map[string]bool{}
	ents, _ := os.ReadDir(filepath.Join(s.templates.store.Dir, "tmp"))
	for _, e := range ents {
		if e.IsDir() {
			m[e.Name()] = true
		}
	}
	return m
}

// TestTemplateBuildCancelledByShutdown: a build in the middle of its pull
// (the registry holds the layer's download open) ends with the server:
// the shutdown returns in bounded time, the build's status says why, and
// neither its goroutine nor its work dir stays.
func TestTemplateBuildCancelledByShutdown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	img := smallImage(t)
	layers, _ := img.Layers()
	layerDigest, _ := layers[0].Digest()
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	pulling := make(chan struct{}, 8)
	release := make(chan struct{})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/blobs/"+layerDigest.String()) {
			w.Header().Set("Content-Length", "1000000")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte{0x1f})
			w.(http.Flusher).Flush()
			pulling <- struct{}{}
			select { // hold the download open until the client goes
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		reg.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { close(release); srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	ref, err := name.ParseReference("127.0.0.1:"+strconv.Itoa(port)+"/test/slow:1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	o := Options{TemplateBuilds: true, TemplateLoopback: []int{port}}
	o.Config.EnvironmentDir = t.TempDir()
	s, base, stop := startOwnServer(t, o)
	before := tmpDirs(s)
	tpl, build := requestAndTrigger(t, base, testKey, "slow-pull", `{"fromImage":"`+ref.String()+`"}`)
	select {
	case <-pulling:
	case <-time.After(30 * time.Second):
		t.Fatal("the build never started pulling the layer")
	}
	if st, _ := buildState(s, "default", tpl, build); st != "building" {
		t.Fatalf("the build is %q while pulling", st)
	}
	start := time.Now()
	if err := stop(); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("the shutdown took %s with a build running", d)
	}
	checkShutdownLeftNothing(t, s, "default", tpl, build, before)
}

// TestTemplateBuildShutdownKillsSteps: a RUN step that would run for five
// minutes is killed by the server's shutdown: no process of it, no jail,
// no work dir is left, and its status says the shutdown cancelled it.
func TestTemplateBuildShutdownKillsSteps(t *testing.T) {
	needSandboxes(t)
	needPython(t)
	team := freshTeam(t)
	s, base, stop := startOwnServer(t, Options{TemplateBuilds: true, Keys: []Key{{Key: testKey, Team: team}}})
	before := tmpDirs(s)
	// The store is the machine's, shared with other tests: a build of
	// the python environment there is not this test's to judge.
	if py, err := s.templates.store.Resolve("python"); err == nil {
		ents, _ := os.ReadDir(filepath.Join(s.templates.store.Dir, "tmp"))
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), py.ID[:12]) {
				before[e.Name()] = true
			}
		}
	}
	// A number no other process's command line has.
	mark := strconv.Itoa(300+int(time.Now().UnixNano()%1000)) + "." + strconv.Itoa(os.Getpid()%100000)
	body, _ := json.Marshal(map[string]any{"fromTemplate": "code-interpreter-v1",
		"steps": []map[string]any{{"type": "RUN", "args": []string{"sleep " + mark}}}})
	tpl, build := requestAndTrigger(t, base, testKey, "long-run", string(body))
	deadline := time.Now().Add(3 * time.Minute)
	for len(procsWith("sleep\x00"+mark)) == 0 {
		if time.Now().After(deadline) {
			st, reason := buildState(s, team, tpl, build)
			t.Fatalf("the RUN step never started (build %s: %s)", st, reason)
		}
		time.Sleep(100 * time.Millisecond)
	}
	start := time.Now()
	if err := stop(); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	// The step sleeps 300 s or more: a shutdown that waited for it
	// rather than killing it takes at least that long. (A loaded machine
	// takes a minute to close everything else.)
	if d := time.Since(start); d > 200*time.Second {
		t.Errorf("the shutdown took %s with a build running: it waited for the step", d)
	}
	for deadline := time.Now().Add(10 * time.Second); len(procsWith("sleep\x00"+mark)) > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("the build's processes outlived the shutdown: %v", procsWith("sleep\x00"+mark))
		}
		time.Sleep(100 * time.Millisecond)
	}
	checkShutdownLeftNothing(t, s, team, tpl, build, before)
}

// procsWith lists the pids whose command line contains s.
func procsWith(s string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if raw, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && strings.Contains(string(raw), s) {
			out = append(out, e.Name())
		}
	}
	return out
}
