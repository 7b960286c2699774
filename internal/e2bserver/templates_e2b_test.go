package e2bserver

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	e2bvariant "github.com/code-sandboxes/code-sandboxes/e2b"
	"github.com/code-sandboxes/code-sandboxes/environments"
	"github.com/code-sandboxes/code-sandboxes/internal/testpypi"
)

// TestE2BVariantBuildsOnServe: the e2b variant's environment build (an E2B
// template through the template API) against serve, end to end: spec →
// template → sandbox on it → the locked package imports, the file and env
// are there. A rebuild under the same name with other content leaves the
// running sandbox, and the name:tag of the first build, on the first build.
func TestE2BVariantBuildsOnServe(t *testing.T) {
	needSandboxes(t)
	needPython(t)
	wheel := testpypi.Wheel(t, "cs_locked", "1.0", "cs_locked", "VALUE = 42\n")
	index := testpypi.Serve(t, "cs-locked", testpypi.FileName("cs_locked", "1.0"), wheel)
	_, url := testServer(t, Options{TemplateBuilds: true, TemplateLoopback: []int{testpypi.Port(t, index)},
		Keys: []Key{{Key: testKey, Team: freshTeam(t)}}})
	for _, k := range []string{"E2B_API_KEY", "E2B_DOMAIN", "E2B_API_URL", "E2B_SANDBOX_URL", "E2B_DEBUG"} {
		t.Setenv(k, "")
	}
	cfg := sandboxes.Config{Variant: "e2b", Options: e2bvariant.Options{APIKey: testKey, APIURL: url, SandboxURL: url}}

	dir := t.TempDir()
	lock := "cs-locked==1.0 \\\n    --hash=sha256:" + testpypi.SHA256(wheel) + "\n"
	if err := os.WriteFile(filepath.Join(dir, "requirements.lock"), []byte(lock), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := func(content string) string {
		p := filepath.Join(dir, "env.yaml")
		s := "name: e2b-variant-env\nbase: {environment: python}\npip: {lock: requirements.lock, index: '" + index + "'}\n" +
			"files:\n  - {path: /opt/app/version, content: '" + content + "'}\nenv: {APP_MODE: e2e}\n"
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var log strings.Builder
	b, err := environments.BuildFile(ctx, spec("one"), environments.Options{Config: &cfg, Progress: &log})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if !strings.Contains(log.String(), "require-hashes") {
		t.Errorf("the build's log did not stream:\n%s", log.String())
	}
	run := func(sb *sandboxes.Sandbox, code string) string {
		t.Helper()
		ex, err := sb.RunCode(ctx, code)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(ex.Stdout())
	}
	c1 := cfg
	c1.Environment = b.Name
	c1.MaxLifetime = 5 * time.Minute
	sb1, err := sandboxes.Create(ctx, c1)
	if err != nil {
		t.Fatal(err)
	}
	defer sb1.Close()
	if got := run(sb1, "import os, pwd, cs_locked\nprint(cs_locked.VALUE, open('/opt/app/version').read(), os.environ.get('APP_MODE'), os.environ.get('LANG'), pwd.getpwuid(1000).pw_name, pwd.getpwuid(1000).pw_gid)"); got != "42 one e2e C.UTF-8 user 100" {
		t.Errorf("in the template's sandbox: %q", got)
	}

	b2, err := environments.BuildFile(ctx, spec("two"), environments.Options{Config: &cfg})
	if err != nil {
		t.Fatal(err)
	}
	if b2.ID == b.ID || b2.Name == b.Name {
		t.Fatalf("the rebuild has the same build id or name: %s %s", b2.ID, b2.Name)
	}
	if got := run(sb1, "print(open('/opt/app/version').read())"); got != "one" {
		t.Errorf("the running sandbox moved with the rebuild: %q", got)
	}
	sb2, err := sandboxes.Create(ctx, c1) // the first build's name:tag, after the rebuild
	if err != nil {
		t.Fatal(err)
	}
	defer sb2.Close()
	if got := run(sb2, "print(open('/opt/app/version').read())"); got != "one" {
		t.Errorf("a new sandbox on the first build's name:tag: %q", got)
	}
	// The variant lists the team's templates it built, newest build each.
	envs, err := sandboxes.ListEnvironments(ctx, cfg)
	var listed []string
	for _, e := range envs {
		listed = append(listed, e.Name+"="+e.BuildID)
	}
	if err != nil || len(envs) != 2 || envs[1].Name != b2.Name || envs[1].BuildID != b2.ID {
		t.Errorf("environments -v e2b: %v %v; want the default and %s=%s", listed, err, b2.Name, b2.ID)
	}
	c3 := cfg
	c3.Environment = b2.Name
	sb3, err := sandboxes.Create(ctx, c3)
	if err != nil {
		t.Fatal(err)
	}
	defer sb3.Close()
	if got := run(sb3, "print(open('/opt/app/version').read())"); got != "two" {
		t.Errorf("a new sandbox on the second build: %q", got)
	}
}
