package e2bserver

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// loopbackRegistry serves a registry on the host's loopback holding
// smallImage as repo ("name:tag"); it returns the port and the reference.
func loopbackRegistry(t *testing.T, repo string) (int, name.Reference) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: registry.New(registry.Logger(log.New(io.Discard, "", 0)))}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	ref, err := name.ParseReference("127.0.0.1:"+strconv.Itoa(port)+"/"+repo, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, smallImage(t)); err != nil {
		t.Fatal(err)
	}
	return port, ref
}

// readyTemplateServer serves a registry on an opened loopback port and
// returns a server with template tplName built from it (tagged default).
func readyTemplateServer(t *testing.T, tplName string) (*Server, string) {
	t.Helper()
	port, ref := loopbackRegistry(t, "test/tags:1")
	o := Options{TemplateBuilds: true, TemplateLoopback: []int{port}}
	o.Config.EnvironmentDir = t.TempDir()
	s, base := testServer(t, o)
	tpl, build := requestAndTrigger(t, base, testKey, tplName, `{"fromImage":"`+ref.String()+`"}`)
	if st, lines := waitBuild(t, base, testKey, tpl, build); st.Status != "ready" {
		t.Fatalf("build: %s %+v\n%s", st.Status, st.Reason, strings.Join(lines, "\n"))
	}
	return s, base
}

// TestTemplateTagsBounded: a template's tags are bounded, by assignTags
// and by a build's tags alike; over the bound is a 400 naming it.
func TestTemplateTagsBounded(t *testing.T) {
	_, base := readyTemplateServer(t, "tagged")
	assigned := 1 // "default"
	for i := 0; i < 10; i++ {
		var tags []string
		for j := 0; j < 16; j++ {
			tags = append(tags, fmt.Sprintf("t%d-%d", i, j))
		}
		body, _ := json.Marshal(map[string]any{"target": "tagged:default", "tags": tags})
		resp := call(t, "POST", base+"/templates/tags", testKey, string(body), nil, nil)
		if assigned+16 <= maxTagsPerTemplate {
			if resp.StatusCode != 201 {
				t.Fatalf("assigning tags %d..%d: %d", assigned, assigned+16, resp.StatusCode)
			}
			assigned += 16
			continue
		}
		wantError(t, "POST", base+"/templates/tags", testKey, string(body), 400, "at most "+strconv.Itoa(maxTagsPerTemplate))
		break
	}
	var list []map[string]any
	call(t, "GET", base+"/templates/tagged/tags", testKey, "", nil, &list)
	if len(list) != assigned || len(list) > maxTagsPerTemplate {
		t.Errorf("the template has %d tags, want %d (at most %d)", len(list), assigned, maxTagsPerTemplate)
	}
	// A build whose tags would pass the bound is refused at its request.
	var tags []string
	for j := 0; j < 16; j++ {
		tags = append(tags, fmt.Sprintf("b-%d", j))
	}
	body, _ := json.Marshal(map[string]any{"name": "tagged", "tags": tags})
	wantError(t, "POST", base+"/v3/templates", testKey, string(body), 400, "at most "+strconv.Itoa(maxTagsPerTemplate))
	// Tags are still checked one by one.
	wantError(t, "POST", base+"/templates/tags", testKey, `{"target":"tagged:default","tags":["`+strings.Repeat("x", 64)+`"]}`, 400, "at most 63")
}
