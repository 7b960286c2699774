package e2bserver

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// E2B's snapshot API on serve --isolation gvisor: names checked before
// anything reaches a path, create/list (filters, paging)/delete, create
// from a snapshot and fork with the state, the per-team cap, and another
// team's key finding nothing of it (404 or an empty list, never its state).
func TestSnapshotsGVisor(t *testing.T) {
	needGVisorServe(t)
	o := Options{Keys: []Key{{Key: keyA, Team: "team-a"}, {Key: keyB, Team: "team-b"}}, MaxSnapshots: 2}
	o.Config.Isolation = "gvisor"
	_, base := testServer(t, o)
	a := createSB(t, base, keyA, `{"templateID":"base","timeout":120}`)
	defer call(t, "DELETE", base+"/sandboxes/"+a.SandboxID, keyA, "", nil, nil)
	execute(t, base, a, "x = 40")
	u := base + "/sandboxes/" + a.SandboxID
	for _, name := range []string{"../x", "..", "a/b", "x:y", ".hidden", "x\u0000y", "x y", strings.Repeat("a", 50), "-x", "x.y"} {
		b := `{"name":` + jsonString(name) + `}`
		wantError(t, "POST", u+"/snapshots", keyA, b, 400, "snapshot name")
	}
	var s1, s2 snapshotInfo
	if resp := call(t, "POST", u+"/snapshots", keyA, `{}`, nil, &s1); resp.StatusCode != 201 || s1.SnapshotID == "" {
		t.Fatalf("snapshot: %d %+v", resp.StatusCode, s1)
	}
	if resp := call(t, "POST", u+"/snapshots", keyA, `{"name":"mysnap"}`, nil, &s2); resp.StatusCode != 201 || len(s2.Names) != 1 || !strings.Contains(s2.Names[0], "mysnap") {
		t.Fatalf("named snapshot: %d %+v", resp.StatusCode, s2)
	}
	wantError(t, "POST", u+"/snapshots", keyA, `{"name":"mysnap"}`, 409, "exists")
	wantError(t, "POST", u+"/snapshots", keyA, `{"name":"third"}`, 429, "--max-snapshots")
	list := func(key, q string) ([]snapshotInfo, string) {
		t.Helper()
		var l []snapshotInfo
		resp := call(t, "GET", base+"/snapshots?"+q, key, "", nil, &l)
		if resp.StatusCode != 200 {
			t.Fatalf("list %q: %d", q, resp.StatusCode)
		}
		return l, resp.Header.Get("X-Next-Token")
	}
	for q, want := range map[string]int{"": 2, "sandboxID=" + a.SandboxID: 2, "sandboxID=nosuch": 0, "name=mysnap": 1, "name=team-a/mysnap:default": 1, "name=nope": 0, "name=../mysnap": 1} {
		if l, _ := list(keyA, q); len(l) != want {
			t.Errorf("list %q: %+v, want %d", q, l, want)
		}
	}
	p1, tok := list(keyA, "limit=1")
	if len(p1) != 1 || tok == "" {
		t.Fatalf("first page: %+v token %q", p1, tok)
	}
	p2, tok2 := list(keyA, "limit=1&nextToken="+url.QueryEscape(tok))
	if len(p2) != 1 || tok2 != "" || p2[0].SnapshotID == p1[0].SnapshotID {
		t.Errorf("second page: %+v token %q (first %+v)", p2, tok2, p1)
	}
	// Team B sees none of it.
	if l, _ := list(keyB, ""); len(l) != 0 {
		t.Errorf("team b lists %+v", l)
	}
	for _, id := range []string{s2.SnapshotID, "mysnap", s1.SnapshotID} {
		if st := call(t, "DELETE", base+"/templates/"+url.PathEscape(id), keyB, "", nil, nil).StatusCode; st != 404 {
			t.Errorf("team b deletes %s: %d, want 404", id, st)
		}
		wantError(t, "POST", base+"/sandboxes", keyB, `{"templateID":`+jsonString(id)+`}`, 400, "unknown")
	}
	wantError(t, "POST", u+"/fork", keyB, `{}`, 404, "not found")
	wantError(t, "POST", u+"/snapshots", keyB, `{}`, 404, "not found")
	// Create from a snapshot: the state, a sandbox of its own.
	wantError(t, "POST", base+"/sandboxes", keyA, `{"templateID":"mysnap:default","allow_internet_access":true}`, 400, "network")
	f := createSB(t, base, keyA, `{"templateID":`+jsonString(s2.SnapshotID)+`,"timeout":60}`)
	defer call(t, "DELETE", base+"/sandboxes/"+f.SandboxID, keyA, "", nil, nil)
	if f.SandboxID == a.SandboxID || f.EnvdAccessToken == a.EnvdAccessToken {
		t.Fatalf("a sandbox from the snapshot shares the source's id or token")
	}
	if out := execute(t, base, f, `print("v=%d" % (x + 2))`); !strings.Contains(out, "v=42") {
		t.Errorf("x + 2 in the sandbox from the snapshot: %s", out)
	}
	// Fork: count sandboxes with the state, the source runs on.
	wantError(t, "POST", u+"/fork", keyA, `{"count":0}`, 400, "count")
	wantError(t, "POST", u+"/fork", keyA, `{"count":101}`, 400, "count")
	var forks []forkResult
	if resp := call(t, "POST", u+"/fork", keyA, `{"count":2,"timeout":60}`, nil, &forks); resp.StatusCode != 201 || len(forks) != 2 {
		t.Fatalf("fork: %d %+v", resp.StatusCode, forks)
	}
	seen := map[string]bool{a.SandboxID: true}
	for _, fr := range forks {
		if fr.Sandbox == nil {
			t.Fatalf("fork failed: %+v", fr.Error)
		}
		defer call(t, "DELETE", base+"/sandboxes/"+fr.Sandbox.SandboxID, keyA, "", nil, nil)
		if seen[fr.Sandbox.SandboxID] {
			t.Errorf("fork id %s repeats", fr.Sandbox.SandboxID)
		}
		seen[fr.Sandbox.SandboxID] = true
		if out := execute(t, base, *fr.Sandbox, `print("v=%d" % (x + 2))`); !strings.Contains(out, "v=42") {
			t.Errorf("x + 2 in fork %s: %s", fr.Sandbox.SandboxID, out)
		}
	}
	if out := execute(t, base, a, `x += 1; print("v=%d" % x)`); !strings.Contains(out, "v=41") {
		t.Errorf("the source after the fork: %s", out)
	}
	if l, _ := list(keyA, ""); len(l) != 2 {
		t.Errorf("after the fork: %d snapshots listed, want 2 (the fork's own is removed)", len(l))
	}
	// Delete: 204, then 404 (the SDK's false).
	for _, id := range []string{s2.SnapshotID, s1.SnapshotID} {
		if st := call(t, "DELETE", base+"/templates/"+url.PathEscape(id), keyA, "", nil, nil).StatusCode; st != http.StatusNoContent {
			t.Errorf("delete %s: %d, want 204", id, st)
		}
		if st := call(t, "DELETE", base+"/templates/"+url.PathEscape(id), keyA, "", nil, nil).StatusCode; st != 404 {
			t.Errorf("delete %s again: %d, want 404", id, st)
		}
	}
	if l, _ := list(keyA, ""); len(l) != 0 {
		t.Errorf("after deleting both: %+v", l)
	}
}

// Without gVisor the snapshot calls say why (501), and the list is empty.
func TestSnapshotsRefused(t *testing.T) {
	needSandboxes(t)
	_, base := testServer(t, Options{})
	a := createSB(t, base, testKey, `{"templateID":"base"}`)
	defer call(t, "DELETE", base+"/sandboxes/"+a.SandboxID, testKey, "", nil, nil)
	wantError(t, "POST", base+"/sandboxes/"+a.SandboxID+"/snapshots", testKey, `{}`, 501, "gvisor")
	wantError(t, "POST", base+"/sandboxes/"+a.SandboxID+"/fork", testKey, `{}`, 501, "gvisor")
	wantError(t, "POST", base+"/sandboxes/nosuch/snapshots", testKey, `{}`, 404, "not found")
	if st := call(t, "GET", base+"/snapshots", "", "", nil, nil).StatusCode; st != 401 {
		t.Errorf("list without a key: %d, want 401", st)
	}
	var l []snapshotInfo
	if resp := call(t, "GET", base+"/snapshots", testKey, "", nil, &l); resp.StatusCode != 200 || len(l) != 0 {
		t.Errorf("list: %d %+v", resp.StatusCode, l)
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
