package e2bserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/testdep"
	"github.com/code-sandboxes/code-sandboxes/local"
)

// needVolumes skips (or fails in CI) where serve can't keep volumes.
func needVolumes(t *testing.T) {
	t.Helper()
	needSandboxes(t)
	err := volumeSupport()
	testdep.Require(t, err == nil, fmt.Sprintf("volumes: %v", err))
}

// volumeDir is a fresh directory for a server's volumes; the volumes
// mounted under it are unmounted at the end (before the directory goes).
func volumeDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	t.Cleanup(func() {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			_ = unmountVolume(filepath.Join(dir, e.Name(), "mnt"))
		}
	})
	return dir
}

func newVolume(t *testing.T, base, key, name string) volumeAndToken {
	t.Helper()
	var v volumeAndToken
	resp := call(t, "POST", base+"/volumes", key, fmt.Sprintf(`{"name":%q}`, name), nil, &v)
	if resp.StatusCode != 201 || v.VolumeID == "" || v.Token == "" || v.Name != name {
		t.Fatalf("create volume %s: %d %+v", name, resp.StatusCode, v)
	}
	return v
}

// stdoutRunner runs Python in sandbox id through the Go API and returns
// what it printed; an error fails the test.
func stdoutRunner(ctx context.Context, t *testing.T, s *Server, id string) func(code string) string {
	return runnerOf(ctx, t, s, id, (*sandboxes.Execution).Stdout)
}

// fillVolume is Python that writes 64 MiB to path and prints whether the
// write stopped with ENOSPC ("errno True") or went through ("wrote all").
func fillVolume(path string) string {
	return `
import errno
try:
    with open("` + path + `", "wb") as f:
        for _ in range(64):
            f.write(b"x" * (1 << 20))
            f.flush()
    print("wrote all")
except OSError as e:
    print("errno", e.errno == errno.ENOSPC)
`
}

// content calls the volume content API with the volume's token.
func content(t *testing.T, base, method, id, op, p, token string, body []byte) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, base+"/volumecontent/"+id+"/"+op+"?path="+p, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b
}

// Two sandboxes of a team share files through a volume, each at a path of
// its own, both reading and changing what the other wrote (each sandbox's
// user is a host uid of its own); the content API sees the same files;
// getInfo lists the mount.
func TestVolumeSharedBySandboxes(t *testing.T) {
	needVolumes(t)
	s, base := testServer(t, Options{VolumeDir: volumeDir(t)})
	v := newVolume(t, base, testKey, "shared")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	a := createSB(t, base, testKey, `{"templateID":"base","volumeMounts":[{"name":"shared","path":"/mnt/data"}]}`)
	b := createSB(t, base, testKey, `{"templateID":"base","volumeMounts":[{"name":"shared","path":"/home/user/vol"}]}`)
	runA, runB := stdoutRunner(ctx, t, s, a.SandboxID), stdoutRunner(ctx, t, s, b.SandboxID)
	runA(`import os; os.makedirs("/mnt/data/d", exist_ok=True); open("/mnt/data/d/a.txt","w").write("from a")`)
	if got := runB(`print(open("/home/user/vol/d/a.txt").read(), end="")`); got != "from a" {
		t.Fatalf("b reads %q", got)
	}
	runB(`open("/home/user/vol/d/a.txt","a").write(" and b")`)
	if got := runA(`print(open("/mnt/data/d/a.txt").read(), end="")`); got != "from a and b" {
		t.Fatalf("a reads %q after b's append", got)
	}
	// The content API: the same files, and a file it writes is the
	// sandboxes'.
	if st, body := content(t, base, "GET", v.VolumeID, "file", "/d/a.txt", v.Token, nil); st != 200 || string(body) != "from a and b" {
		t.Fatalf("content read: %d %q", st, body)
	}
	if st, body := content(t, base, "PUT", v.VolumeID, "file", "/api/b.txt", v.Token, []byte("from the API")); st != 201 {
		t.Fatalf("content write: %d %s", st, body)
	}
	if got := runA(`print(open("/mnt/data/api/b.txt").read(), end="")`); got != "from the API" {
		t.Fatalf("a reads %q", got)
	}
	runA(`open("/mnt/data/api/b.txt","w").write("changed")`)
	var list []entryStat
	st, body := content(t, base, "GET", v.VolumeID, "dir", "/", v.Token, nil)
	if err := json.Unmarshal(body, &list); st != 200 || err != nil || len(list) != 2 || list[0].Name != "api" || list[0].Type != "directory" {
		t.Fatalf("list: %d %s", st, body)
	}
	var d sandboxDetail
	call(t, "GET", base+"/sandboxes/"+b.SandboxID, testKey, "", nil, &d)
	if fmt.Sprint(d.VolumeMounts) != "[map[name:shared path:/home/user/vol]]" {
		t.Errorf("getInfo volumeMounts %v", d.VolumeMounts)
	}
}

// A volume is its team's: another team gets 404 for it in every call
// (get, destroy, content with any token), doesn't list it, can't mount it
// by name (its own volume of that name is another one) and never sees its
// files.
func TestVolumeOtherTeamCannotReach(t *testing.T) {
	needVolumes(t)
	const keyB = "e2b_bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	s, base := testServer(t, Options{VolumeDir: volumeDir(t), Keys: []Key{{Key: testKey, Team: "a"}, {Key: keyB, Team: "b"}}})
	va := newVolume(t, base, testKey, "data")
	if st, body := content(t, base, "PUT", va.VolumeID, "file", "/secret", va.Token, []byte("team a's")); st != 201 {
		t.Fatalf("write: %d %s", st, body)
	}
	wantError(t, "GET", base+"/volumes/"+va.VolumeID, keyB, "", 404, "not found")
	wantError(t, "DELETE", base+"/volumes/"+va.VolumeID, keyB, "", 404, "not found")
	var list []volumeJSON
	call(t, "GET", base+"/volumes", keyB, "", nil, &list)
	if len(list) != 0 {
		t.Fatalf("team b lists %v", list)
	}
	wantError(t, "POST", base+"/sandboxes", keyB, `{"templateID":"base","volumeMounts":[{"name":"data","path":"/mnt/x"}]}`, 400, "not found")
	// Team b's own "data" is another volume; its token opens only it.
	vb := newVolume(t, base, keyB, "data")
	for _, tok := range []string{vb.Token, "", "vt_wrong", va.Token + "x"} {
		for _, op := range []string{"file", "path"} {
			if st, body := content(t, base, "GET", va.VolumeID, op, "/secret", tok, nil); st != 404 || strings.Contains(string(body), "team a's") {
				t.Errorf("content %s of a's volume with token %q: %d %s", op, tok, st, body)
			}
		}
	}
	if st, _ := content(t, base, "GET", vb.VolumeID, "file", "/secret", vb.Token, nil); st != 404 {
		t.Errorf("b's own volume has a's file: %d", st)
	}
	// Mounted by b: b's volume, empty of a's file.
	sb := createSB(t, base, keyB, `{"templateID":"base","volumeMounts":[{"name":"data","path":"/mnt/x"}]}`)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if got := stdoutRunner(ctx, t, s, sb.SandboxID)(`import os; print(os.listdir("/mnt/x"))`); strings.TrimSpace(got) != "[]" {
		t.Errorf("b's sandbox sees %s", got)
	}
	// Paths out of the volume through the content API.
	for _, p := range []string{"/../../record.json", "../image", "/a/../../x"} {
		if st, body := content(t, base, "GET", va.VolumeID, "file", p, va.Token, nil); st != 400 {
			t.Errorf("path %q: %d %s", p, st, body)
		}
	}
}

// Where a volume may be mounted: absolute, not /, not over the sandbox's
// own mounts, not under /proc, /sys, /dev or the system directories, no
// '..'; each refused with 400 and what to do, before any sandbox starts.
func TestVolumeMountPathsRefused(t *testing.T) {
	needVolumes(t)
	_, base := testServer(t, Options{VolumeDir: volumeDir(t)})
	newVolume(t, base, testKey, "v")
	for _, p := range []string{"", "data", "/", "//", "/proc", "/proc/x", "/sys/fs", "/dev/shm", "/etc", "/usr/local/x",
		"/mnt/../etc", "/mnt/./x", "/home/user", "/tmp", "/files", "/mnt/a:b"} {
		body := fmt.Sprintf(`{"templateID":"base","volumeMounts":[{"name":"v","path":%q}]}`, p)
		wantError(t, "POST", base+"/sandboxes", testKey, body, 400, "volume path")
	}
	wantError(t, "POST", base+"/sandboxes", testKey, `{"templateID":"base","volumeMounts":[{"name":"v","path":"/mnt/a"},{"name":"v","path":"/mnt/b"}]}`, 400, "twice")
	wantError(t, "POST", base+"/sandboxes", testKey, `{"templateID":"base","volumeMounts":[{"name":"v","path":"/mnt/a","x":1}]}`, 400, "volumeMounts")
	wantError(t, "POST", base+"/volumes", testKey, `{"name":"../x"}`, 400, "volume name")
	wantError(t, "POST", base+"/volumes", testKey, `{"name":"v"}`, 409, "already")
}

// A volume holds its size and no more: a sandbox's write beyond fails with
// ENOSPC, an upload beyond with 413, and the host keeps at most the size.
func TestVolumeSizeBound(t *testing.T) {
	needVolumes(t)
	dir := volumeDir(t)
	const size = 32 << 20
	s, base := testServer(t, Options{VolumeDir: dir, VolumeSize: size})
	v := newVolume(t, base, testKey, "small")
	sb := createSB(t, base, testKey, `{"templateID":"base","volumeMounts":[{"name":"small","path":"/mnt/v"}]}`)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	got := stdoutRunner(ctx, t, s, sb.SandboxID)(fillVolume("/mnt/v/big"))
	if strings.TrimSpace(got) != "errno True" {
		t.Fatalf("a 64 MiB write in a 32 MiB volume: %q", got)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(dir, v.VolumeID, "image"), &st); err != nil {
		t.Fatal(err)
	}
	if used := st.Blocks * 512; used > size+size/8 {
		t.Errorf("the image holds %d bytes on the host, more than the volume's %d", used, size)
	}
	code, body := content(t, base, "PUT", v.VolumeID, "file", "/more", v.Token, bytes.Repeat([]byte("y"), 40<<20))
	if code != 413 || !strings.Contains(string(body), "full") {
		t.Errorf("a 40 MiB upload: %d %s", code, body)
	}
	if c, _ := content(t, base, "GET", v.VolumeID, "path", "/more", v.Token, nil); c != 404 {
		t.Errorf("the failed upload left its file: %d", c)
	}
}

// A volume in use is not destroyed: 409 naming the sandbox; once it is
// gone, destroy works and the volume is gone (404, not listed).
func TestVolumeDestroyInUseRefused(t *testing.T) {
	needVolumes(t)
	dir := volumeDir(t)
	_, base := testServer(t, Options{VolumeDir: dir})
	v := newVolume(t, base, testKey, "busy")
	sb := createSB(t, base, testKey, `{"templateID":"base","volumeMounts":[{"name":"busy","path":"/mnt/v"}]}`)
	wantError(t, "DELETE", base+"/volumes/"+v.VolumeID, testKey, "", 409, sb.SandboxID)
	if resp := call(t, "DELETE", base+"/sandboxes/"+sb.SandboxID, testKey, "", nil, nil); resp.StatusCode != 204 {
		t.Fatalf("kill: %d", resp.StatusCode)
	}
	if resp := call(t, "DELETE", base+"/volumes/"+v.VolumeID, testKey, "", nil, nil); resp.StatusCode != 204 {
		t.Fatalf("destroy: %d", resp.StatusCode)
	}
	wantError(t, "GET", base+"/volumes/"+v.VolumeID, testKey, "", 404, "not found")
	if _, err := os.Stat(filepath.Join(dir, v.VolumeID)); !os.IsNotExist(err) {
		t.Errorf("the volume's directory is still there: %v", err)
	}
}

// A volume and its files outlive serve: a new server over the same
// directory has it (same id, name and token), its files, and mounts it.
func TestVolumeSurvivesRestart(t *testing.T) {
	needVolumes(t)
	dir := volumeDir(t)
	rt := t.TempDir()
	start := func() (*Server, string, func() error) {
		s, err := New(Options{APIKeys: []string{testKey}, VolumeDir: dir, Config: sandboxes.Config{Options: local.Options{RuntimeDir: rt}}})
		if err != nil {
			t.Fatal(err)
		}
		url, stop, err := s.StartLoopback(false)
		if err != nil {
			t.Fatal(err)
		}
		return s, url, stop
	}
	s1, base1, stop1 := start()
	v := newVolume(t, base1, testKey, "keep")
	sb := createSB(t, base1, testKey, `{"templateID":"base","volumeMounts":[{"name":"keep","path":"/mnt/k"}]}`)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stdoutRunner(ctx, t, s1, sb.SandboxID)(`open("/mnt/k/f","w").write("kept")`)
	if err := stop1(); err != nil {
		t.Fatal(err)
	}
	// As after a reboot: nothing mounted.
	if err := unmountVolume(filepath.Join(dir, v.VolumeID, "mnt")); err != nil {
		t.Fatal(err)
	}
	s2, base2, stop2 := start()
	defer stop2()
	var got volumeAndToken
	if resp := call(t, "GET", base2+"/volumes/"+v.VolumeID, testKey, "", nil, &got); resp.StatusCode != 200 || got != v {
		t.Fatalf("after restart: %d %+v, want %+v", resp.StatusCode, got, v)
	}
	if st, body := content(t, base2, "GET", v.VolumeID, "file", "/f", v.Token, nil); st != 200 || string(body) != "kept" {
		t.Fatalf("after restart: %d %q", st, body)
	}
	sb2 := createSB(t, base2, testKey, `{"templateID":"base","volumeMounts":[{"name":"keep","path":"/mnt/k"}]}`)
	if got := stdoutRunner(ctx, t, s2, sb2.SandboxID)(`print(open("/mnt/k/f").read(), end="")`); got != "kept" {
		t.Fatalf("a new sandbox reads %q", got)
	}
}

// E2B's official JS SDK's Volume against serve (e2e/e2bjs/volume.test.mjs):
// the static calls, the volume's file calls, volumeMounts at create, and
// destroy refused while mounted, then done.
func TestOfficialJSSDKVolume(t *testing.T) {
	needVolumes(t)
	node, npm := needNode(t)
	npmCI(t, npm)
	_, url := testServer(t, Options{VolumeDir: volumeDir(t)})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep := runNodeScript(ctx, t, node, "volume.test.mjs", url, "E2B_VOLUME_API_URL="+url)
	want := map[string]string{
		"list":    `["jsvol"]`,
		"getInfo": `{"name":"jsvol","sameToken":true}`,
		"files": `{"written":{"path":"/dir/a.txt","size":12,"type":"file"},"read":"hello volume","dir":"directory",` +
			`"info":{"size":12,"type":"file","mtimeIsDate":true},"mode":384,"root":["d2:directory","dir:directory"],` +
			`"deep":["/d2","/d2/sub","/dir","/dir/a.txt"],"d2Gone":true,"exists":true}`,
		"missing":      `{"error":"VolumePathNotFoundError"}`,
		"mount":        `{"inSandbox":"from the API","fromSandbox":"from the sandbox\n","mounts":[{"name":"jsvol","path":"/mnt/vol"}]}`,
		"destroy":      `{"first":true,"again":false,"after":"VolumeNotFoundError"}`,
		"destroyInUse": "",
	}
	for name, w := range want {
		got := string(rep.Steps[name])
		if name == "destroyInUse" {
			if !strings.Contains(got, `"error":"VolumeError"`) || !strings.Contains(got, "kill them first") {
				t.Errorf("step %s: %s", name, got)
			}
			continue
		}
		if got != w {
			t.Errorf("step %s:\n got %s\nwant %s", name, got, w)
		}
	}
	var c struct {
		ID, Name string
		HasToken bool
	}
	if err := json.Unmarshal(rep.Steps["create"], &c); err != nil || !volumeIDPattern.MatchString(c.ID) || c.Name != "jsvol" || !c.HasToken {
		t.Errorf("step create: %s", rep.Steps["create"])
	}
	if got, w := string(rep.Steps["connect"]), fmt.Sprintf(`{"name":"jsvol","id":%q}`, c.ID); got != w {
		t.Errorf("step connect: %s, want %s", got, w)
	}
}

// What a sandbox can plant in its volume can't hang or fool the content
// API: a FIFO (opening it would block until a writer comes), a symlink out
// of the volume (absolute or by ..) and one to a directory outside: each
// answered at once, never with the host's files.
func TestVolumeContentPlantedFiles(t *testing.T) {
	needVolumes(t)
	s, base := testServer(t, Options{VolumeDir: volumeDir(t)})
	v := newVolume(t, base, testKey, "planted")
	mnt := s.volumes.mnt(v.VolumeID)
	// Planted as a sandbox would (the same file system, from the host).
	if err := syscall.Mkfifo(filepath.Join(mnt, "fifo"), 0o666); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"abs": "/etc/passwd", "rel": "../../../../../../etc/passwd", "dir": "/etc"} {
		if err := os.Symlink(target, filepath.Join(mnt, name)); err != nil {
			t.Fatal(err)
		}
	}
	type res struct {
		st   int
		body []byte
	}
	for _, c := range []struct{ method, op, path string }{
		{"GET", "file", "/fifo"}, {"PUT", "file", "/fifo"}, {"GET", "dir", "/fifo"},
		{"GET", "file", "/abs"}, {"GET", "file", "/rel"}, {"GET", "dir", "/dir"}, {"PUT", "file", "/abs"}, {"PUT", "file", "/dir/x"},
	} {
		done := make(chan res, 1)
		go func() {
			var body []byte
			if c.method == "PUT" {
				body = []byte("x")
			}
			st, b := content(t, base, c.method, v.VolumeID, c.op, c.path, v.Token, body)
			done <- res{st, b}
		}()
		select {
		case r := <-done:
			if r.st < 400 || r.st >= 500 || strings.Contains(string(r.body), "root:") {
				t.Errorf("%s %s %s: %d %s", c.method, c.op, c.path, r.st, r.body)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s %s %s: no answer in 10s", c.method, c.op, c.path)
		}
	}
	if b, err := os.ReadFile("/etc/passwd"); err != nil || len(b) == 0 {
		t.Fatalf("/etc/passwd: %v", err)
	}
}

// serve on the docker variant: two containers of a team share a volume
// (each container's user a host uid of its own), the content API sees
// what they wrote, and the size bound holds there too.
func TestVolumeDockerVariant(t *testing.T) {
	needVolumes(t)
	needDocker(t)
	s, base := testServer(t, Options{VolumeDir: volumeDir(t), VolumeSize: 32 << 20,
		Config: sandboxes.Config{Variant: "docker", EnvironmentDir: os.Getenv("CODE_SANDBOXES_TEST_ENV_DIR")}})
	v := newVolume(t, base, testKey, "dv")
	a := createSB(t, base, testKey, `{"templateID":"base","timeout":120,"volumeMounts":[{"name":"dv","path":"/mnt/d"}]}`)
	b := createSB(t, base, testKey, `{"templateID":"base","timeout":120,"volumeMounts":[{"name":"dv","path":"/home/user/d"}]}`)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	stdoutRunner(ctx, t, s, a.SandboxID)(`open("/mnt/d/f","w").write("docker a")`)
	if got := stdoutRunner(ctx, t, s, b.SandboxID)(`open("/home/user/d/f","a").write(" b"); print(open("/home/user/d/f").read(), end="")`); got != "docker a b" {
		t.Fatalf("b reads %q", got)
	}
	if st, body := content(t, base, "GET", v.VolumeID, "file", "/f", v.Token, nil); st != 200 || string(body) != "docker a b" {
		t.Fatalf("content: %d %q", st, body)
	}
	got := stdoutRunner(ctx, t, s, a.SandboxID)(fillVolume("/mnt/d/big"))
	if strings.TrimSpace(got) != "errno True" {
		t.Fatalf("a 64 MiB write in a 32 MiB volume: %q", got)
	}
}
