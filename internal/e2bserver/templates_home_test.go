package e2bserver

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/local"
)

// TestTemplateHomeInSandbox: what a template's build leaves in /home/user
// (as the official SDK's Template().runCmd('echo … > /home/user/built.txt')
// sends it) is in every sandbox of the template, as on E2B: the home
// starts as a copy of the template's, owned by the sandbox's user and
// writable. The home's size bound still holds: code can't write past it,
// and a template whose home is larger than it is refused at create, with
// the reason.
func TestTemplateHomeInSandbox(t *testing.T) {
	needSandboxes(t)
	needPython(t)
	testTemplateHome(t, sandboxes.Config{Options: local.Options{HomeSize: 64 << 20}}, 64<<20)
}

// The same under gVisor: runsc mounts the template's home read-only
// beside the home tmpfs, and the agent copies it in as the sandbox's user.
func TestTemplateHomeInSandboxGVisor(t *testing.T) {
	needGVisorServe(t)
	needPython(t)
	testTemplateHome(t, sandboxes.Config{Isolation: sandboxes.IsolationGVisor, Options: local.Options{HomeSize: 64 << 20}}, 64<<20)
}

// And on the docker variant (its home is half the memory: 96 MiB).
func TestTemplateHomeInSandboxDocker(t *testing.T) {
	needDocker(t)
	needPython(t)
	testTemplateHome(t, sandboxes.Config{Variant: "docker", Memory: 192 << 20}, 96<<20)
}

// testTemplateHome runs the test on cfg, whose sandboxes' home is home
// bytes.
func testTemplateHome(t *testing.T, cfg sandboxes.Config, home int64) {
	team := freshTeam(t)
	_, base := testServer(t, Options{TemplateBuilds: true, Keys: []Key{{Key: testKey, Team: team}}, Config: cfg})

	build := func(name, cmd string) {
		t.Helper()
		var req struct{ TemplateID, BuildID string }
		if resp := call(t, "POST", base+"/v3/templates", testKey, `{"name":"`+name+`"}`, nil, &req); resp.StatusCode != 202 {
			t.Fatalf("POST /v3/templates: %d", resp.StatusCode)
		}
		body := `{"fromTemplate":"code-interpreter-v1","steps":[{"type":"RUN","args":[` + strconv.Quote(cmd) + `,"user"],"force":false}]}`
		if resp := call(t, "POST", base+"/v2/templates/"+req.TemplateID+"/builds/"+req.BuildID, testKey, body, nil, nil); resp.StatusCode != 202 {
			t.Fatalf("start build: %d", resp.StatusCode)
		}
		if st, logs := waitBuild(t, base, testKey, req.TemplateID, req.BuildID); st.Status != "ready" {
			t.Fatalf("build %s: %s %+v\n%s", name, st.Status, st.Reason, strings.Join(logs, "\n"))
		}
	}
	build("home-seeded", "echo built in the template > /home/user/built.txt && mkdir -p /home/user/.config/app && "+
		"echo 'x = 1' > /home/user/.config/app/rc && ln -s built.txt /home/user/link && ln -s /etc/shadow /home/user/shadow")

	var sb sandboxJSON
	if resp := call(t, "POST", base+"/sandboxes", testKey, `{"templateID":"home-seeded","timeout":120}`, nil, &sb); resp.StatusCode != 201 {
		t.Fatalf("create on the template: %d", resp.StatusCode)
	}
	defer call(t, "DELETE", base+"/sandboxes/"+sb.SandboxID, testKey, "", nil, nil)
	run := func(code string) string {
		r, _ := http.NewRequest("POST", base+"/execute", strings.NewReader(`{"code":`+strconv.Quote(code)+`}`))
		r.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
		r.Header.Set("E2b-Sandbox-Port", "49999")
		r.Header.Set("X-Access-Token", sb.EnvdAccessToken)
		r.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return string(out)
	}
	out := run(`import os
st = os.stat('/home/user/built.txt')
print(open('/home/user/built.txt').read().strip(), '|', open('/home/user/.config/app/rc').read().strip(), oct(os.stat('/home/user/.config/app/rc').st_mode & 0o777),
      '|', os.readlink('/home/user/link'), open('/home/user/link').read().strip(), '|', os.readlink('/home/user/shadow'), os.access('/home/user/shadow', os.R_OK),
      '|', st.st_uid, os.getuid())
open('/home/user/built.txt', 'a').write('and in the sandbox\n')
print(open('/home/user/built.txt').read().split('\n')[1])`)
	if !strings.Contains(out, "built in the template | x = 1 0o644 | built.txt built in the template | /etc/shadow False | 1000 1000") || !strings.Contains(out, "and in the sandbox") {
		t.Errorf("the template's home in its sandbox: %s", out)
	}
	if cfg.Isolation == sandboxes.IsolationGVisor {
		// A checkpoint holds the seeded home, and runsc restores it onto
		// the same mounts, the seed's among them.
		u := base + "/sandboxes/" + sb.SandboxID
		if resp := call(t, "POST", u+"/pause", testKey, "", nil, nil); resp.StatusCode != 204 {
			t.Fatalf("pause: %d, want 204", resp.StatusCode)
		}
		if resp := call(t, "POST", u+"/resume", testKey, `{}`, nil, nil); resp.StatusCode != 201 {
			t.Fatalf("resume: %d, want 201", resp.StatusCode)
		}
		if out := run("print(open('/home/user/built.txt').read().split('\\n')[1])"); !strings.Contains(out, "and in the sandbox") {
			t.Errorf("the home after a pause and resume: %s", out)
		}
	}
	// The bound holds for what the code writes.
	// (A MiB at a time: the memory limit, which the home's pages count
	// against, must hold the kernel too.)
	fill := fmt.Sprintf("import os\ntry:\n    with open('/home/user/fill', 'wb') as f:\n        for _ in range(%d):\n            f.write(b'0' * (1 << 20))\n"+
		"    print('wrote past the bound')\nexcept OSError as e:\n    print('refused', e.errno)\nos.remove('/home/user/fill')", home>>20+16)
	if out := run(fill); !strings.Contains(out, "refused 28") {
		t.Errorf("writing past the home's bound: %s", out)
	}

	// A template whose home outgrows the bound: refused at create.
	build("home-too-big", fmt.Sprintf("head -c %d /dev/zero > /home/user/big", home+36<<20))
	wantError(t, "POST", base+"/sandboxes", testKey, `{"templateID":"home-too-big","timeout":120}`, 400, "does not fit the sandbox's home")
}
