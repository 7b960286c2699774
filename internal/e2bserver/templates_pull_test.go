package e2bserver

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// requestAndTrigger requests a build of template name and starts it with
// body; it returns the template's and the build's ids.
func requestAndTrigger(t *testing.T, base, key, tplName, body string) (string, string) {
	t.Helper()
	var req struct {
		TemplateID string `json:"templateID"`
		BuildID    string `json:"buildID"`
	}
	if resp := call(t, "POST", base+"/v3/templates", key, `{"name":"`+tplName+`"}`, nil, &req); resp.StatusCode != 202 {
		t.Fatalf("POST /v3/templates: %d", resp.StatusCode)
	}
	if resp := call(t, "POST", base+"/v2/templates/"+req.TemplateID+"/builds/"+req.BuildID, key, body, nil, nil); resp.StatusCode != 202 {
		t.Fatalf("trigger: %d", resp.StatusCode)
	}
	return req.TemplateID, req.BuildID
}

// TestTemplatePullRefusesHostLoopback: a fromImage on this machine's
// loopback (a port the operator did not open) is refused before any byte
// reaches it, whatever spelling names the loopback, and nothing of what a
// server there would answer shows in the build's status or log.
func TestTemplatePullRefusesHostLoopback(t *testing.T) {
	const marker = "host-secret-marker-5e1f"
	var hits atomic.Int64
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("X-Leak", marker)
		http.Error(w, `{"errors":[{"code":"DENIED","message":"`+marker+`"}]}`, http.StatusNotFound)
	})
	var ports []string
	for _, network := range []string{"tcp4", "tcp6"} {
		addr := "127.0.0.1:0"
		if network == "tcp6" {
			addr = "[::1]:0"
		}
		ln, err := net.Listen(network, addr)
		if err != nil {
			if network == "tcp6" {
				continue // no IPv6 loopback here: the v4 listener serves the other spellings
			}
			t.Fatal(err)
		}
		srv := &http.Server{Handler: handler}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { srv.Close() })
		ports = append(ports, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	}
	// One port on both families where we can (so localhost's every
	// address answers): listen on the v4 port's number on ::1 too.
	port := ports[0]
	if ln6, err := net.Listen("tcp6", "[::1]:"+port); err == nil {
		srv := &http.Server{Handler: handler}
		go func() { _ = srv.Serve(ln6) }()
		t.Cleanup(func() { srv.Close() })
	}
	// The operator opened another port, not this one; what answers there
	// redirects every request to the port that is not open (a redirect is
	// a connection like any other: checked too).
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	otherPort := other.Addr().(*net.TCPAddr).Port
	redirector := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://127.0.0.1:"+port+r.URL.Path, http.StatusTemporaryRedirect)
	})}
	go func() { _ = redirector.Serve(other) }()
	t.Cleanup(func() { redirector.Close() })
	o := Options{TemplateBuilds: true, TemplateLoopback: []int{otherPort}}
	o.Config.EnvironmentDir = t.TempDir()
	_, base := testServer(t, o)
	base = strings.TrimSuffix(base, "/")
	images := []string{"127.0.0.1:" + port + "/x:y", "localhost:" + port + "/x:y", "[::1]:" + port + "/x:y", "127.0.0.1:" + strconv.Itoa(otherPort) + "/x:y"}
	if len(ports) > 1 {
		images = append(images, "[::1]:"+ports[1]+"/x:y")
	}
	for i, img := range images {
		tpl, build := requestAndTrigger(t, base, testKey, "pull-loopback-"+strconv.Itoa(i), `{"fromImage":"`+img+`"}`)
		st, lines := waitBuild(t, base, testKey, tpl, build)
		raw, _ := json.Marshal(st)
		all := string(raw) + "\n" + strings.Join(lines, "\n")
		if st.Status != "error" || st.Reason == nil || !strings.Contains(st.Reason.Message, "refused") {
			t.Errorf("fromImage %s: status %s, want an error that says refused: %s", img, st.Status, all)
		}
		if strings.Contains(all, marker) {
			t.Errorf("fromImage %s: the loopback server's answer reached the tenant: %s", img, all)
		}
		t.Logf("fromImage %s: %s", img, st.Reason.Message)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the host's loopback server got %d requests from template builds, want 0", n)
	}
}

// TestTemplatePullOpenedLoopbackPort: the port the operator opened
// (--template-build-loopback-port) still serves image pulls.
func TestTemplatePullOpenedLoopbackPort(t *testing.T) {
	port, ref := loopbackRegistry(t, "test/pull:1")
	img := ref.String()
	// A server on another opened port that answers with a body of its own:
	// the build fails saying only the status.
	const marker = "registry-body-marker-77c2"
	leaky, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lsrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Www-Authenticate", marker)
		http.Error(w, `{"errors":[{"code":"NAME_UNKNOWN","message":"`+marker+`","detail":"`+marker+`"}]}`, http.StatusNotFound)
	})}
	go func() { _ = lsrv.Serve(leaky) }()
	t.Cleanup(func() { lsrv.Close() })
	leakyPort := leaky.Addr().(*net.TCPAddr).Port
	o := Options{TemplateBuilds: true, TemplateLoopback: []int{port, leakyPort}}
	o.Config.EnvironmentDir = t.TempDir()
	_, base := testServer(t, o)
	tpl, build := requestAndTrigger(t, base, testKey, "pull-opened", `{"fromImage":"`+img+`"}`)
	st, lines := waitBuild(t, base, testKey, tpl, build)
	if st.Status != "ready" {
		t.Fatalf("build from the opened loopback port: %s %+v\n%s", st.Status, st.Reason, strings.Join(lines, "\n"))
	}
	tpl, build = requestAndTrigger(t, base, testKey, "pull-leaky", `{"fromImage":"127.0.0.1:`+strconv.Itoa(leakyPort)+`/x:y"}`)
	st, lines = waitBuild(t, base, testKey, tpl, build)
	raw, _ := json.Marshal(st)
	all := string(raw) + "\n" + strings.Join(lines, "\n")
	if st.Status != "error" || st.Reason == nil || !strings.Contains(st.Reason.Message, "the registry answered 404 Not Found") {
		t.Errorf("a registry's 404: status %s, want a reason with only the status: %s", st.Status, all)
	}
	if strings.Contains(all, marker) {
		t.Errorf("the registry's answer reached the tenant: %s", all)
	}
}

// smallImage is a one-layer image with what a build checks for.
func smallImage(t *testing.T) v1.Image {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	files := map[string]string{"etc/os-release": "ID=test\n", "usr/bin/python3": "#!/bin/sh\n"}
	for _, h := range []tar.Header{{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "usr/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "usr/bin/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "etc/os-release", Typeflag: tar.TypeReg, Mode: 0o644},
		{Name: "usr/bin/python3", Typeflag: tar.TypeReg, Mode: 0o755}} {
		h.Size = int64(len(files[h.Name]))
		_ = tw.WriteHeader(&h)
		_, _ = tw.Write([]byte(files[h.Name]))
	}
	_ = tw.Close()
	raw := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		t.Fatal(err)
	}
	return img
}
