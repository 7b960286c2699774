package e2bserver

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	_ "github.com/code-sandboxes/code-sandboxes/docker" // registers the docker variant
	"github.com/code-sandboxes/code-sandboxes/internal/environment"
	"github.com/code-sandboxes/code-sandboxes/internal/testdep"
	k8svariant "github.com/code-sandboxes/code-sandboxes/kubernetes"
	"github.com/code-sandboxes/code-sandboxes/sandboxestest"
)

// e2bjsDir holds the pinned official SDKs and the script that drives them.
var e2bjsDir = filepath.Join("..", "..", "e2e", "e2bjs")

// needNode finds node and npm; without them the test skips, except in CI
// (CI=true), where a missing toolchain must not pass silently.
func needNode(t *testing.T) (node, npm string) {
	t.Helper()
	node, err1 := exec.LookPath("node")
	npm, err2 := exec.LookPath("npm")
	testdep.Require(t, err1 == nil && err2 == nil, fmt.Sprintf("node and npm (make deps): %v %v", err1, err2))
	return node, npm
}

// npmCI installs the pinned SDKs from package-lock.json when node_modules is
// missing (npm ci is exact and refuses a lock file out of sync).
func npmCI(t *testing.T, npm string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(e2bjsDir, "node_modules", "@e2b", "code-interpreter")); err == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
	cmd.Dir = e2bjsDir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci: %v\n%s", err, out)
	}
}

// sdkReport is what sdk.test.mjs prints.
type sdkReport struct {
	OK    bool                       `json:"ok"`
	Error string                     `json:"error"`
	Steps map[string]json.RawMessage `json:"steps"`
}

func TestOfficialJSSDK(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sandboxes and node")
	}
	needSandboxes(t)
	testOfficialJSSDK(t, Options{})
}

// TestOfficialJSSDKDocker: the same SDK run against serve --variant docker.
func TestOfficialJSSDKDocker(t *testing.T) {
	if testing.Short() {
		t.Skip("starts containers and node")
	}
	needDocker(t)
	dir := os.Getenv("CODE_SANDBOXES_TEST_ENV_DIR")
	// The first sandbox builds the python environment (minutes); do it
	// before the server's bounded create.
	st, err := environment.Open(cmp.Or(dir, environment.DefaultDir()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	_, err = st.Ensure(ctx, "python", environment.BuildOptions{Progress: os.Stderr})
	sandboxestest.Require(t, err == nil, fmt.Sprintf("the python environment (network to the Debian mirror): %v", err))
	testOfficialJSSDK(t, Options{Config: sandboxes.Config{Variant: "docker", EnvironmentDir: dir}})
}

// TestOfficialJSSDKKubernetes: the same SDK run against serve --variant
// kubernetes, on the cluster make test brings up (scripts/with-k8s.sh sets
// KUBECONFIG and CODE_SANDBOXES_K8S_IMPORT). The pods run the python
// environment with this (static) test binary as their agent, imported into
// the cluster as the kubernetes tests of the root package do.
func TestOfficialJSSDKKubernetes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts pods and node")
	}
	sandboxestest.Require(t, os.Getenv("KUBECONFIG") != "", "a Kubernetes cluster: run under scripts/with-k8s.sh (make test does)")
	sandboxestest.Require(t, os.Getenv("CODE_SANDBOXES_K8S_IMPORT") != "", "a way to load images into the cluster ($CODE_SANDBOXES_K8S_IMPORT, set by scripts/with-k8s.sh)")
	requireStatic(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	st, err := environment.Open("")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	b, err := st.Ensure(ctx, "python", environment.BuildOptions{Progress: os.Stderr})
	sandboxestest.Require(t, err == nil, fmt.Sprintf("the python environment: %v", err))
	tag := environment.ImageTag(b)
	tarPath := filepath.Join(t.TempDir(), "image.tar")
	f, err := os.Create(tarPath)
	if err != nil {
		t.Fatal(err)
	}
	err = environment.WriteImageTar(ctx, b, tag, []environment.ExtraFile{{Path: environment.AgentPath, HostPath: exe, Mode: 0o755}}, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("exporting the python environment: %v", err)
	}
	argv := append(strings.Fields(os.Getenv("CODE_SANDBOXES_K8S_IMPORT")), tarPath)
	if out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("importing %s: %v: %s", tag, err, out)
	}
	// The test cluster's network plugin does not enforce NetworkPolicy, so
	// the variant refuses network none there (as the root package's
	// kubernetes tests, these sandboxes get network all).
	testOfficialJSSDK(t, Options{DefaultNetwork: sandboxes.NetworkAll, Config: sandboxes.Config{Variant: "kubernetes",
		Options: k8svariant.Options{Image: tag, ImagePullPolicy: "Never"}}})
}

// runNodeScript runs one of e2e/e2bjs's scripts with node against serve at
// url (extra environment variables in env) and returns its report, the
// JSON object on its last line; a script that failed fails the test.
func runNodeScript(ctx context.Context, t *testing.T, node, script, url string, env ...string) sdkReport {
	t.Helper()
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Dir = e2bjsDir
	cmd.Env = append(os.Environ(), "E2B_API_URL="+url, "E2B_SANDBOX_URL="+url, "E2B_API_KEY="+testKey,
		"E2B_DEBUG=", "E2B_DOMAIN=localhost")
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	started := time.Now()
	runErr := cmd.Run()
	t.Logf("node ran %s", time.Since(started).Round(time.Millisecond))
	var rep sdkReport
	if err := json.Unmarshal(bytes.TrimSpace(lastLine(stdout.Bytes())), &rep); err != nil {
		t.Fatalf("node: %v; output not JSON: %v\nstdout: %s\nstderr: %s", runErr, err, stdout.String(), stderr.String())
	}
	if !rep.OK || runErr != nil {
		t.Fatalf("script failed: %v: %s\nsteps: %s\nstderr: %s", runErr, rep.Error, stdout.String(), stderr.String())
	}
	t.Logf("steps: %s", stdout.String())
	return rep
}

func testOfficialJSSDK(t *testing.T, o Options) {
	node, npm := needNode(t)
	npmCI(t, npm)
	s, url := testServer(t, o)

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rep := runNodeScript(ctx, t, node, "sdk.test.mjs", url)

	step := func(name string, v any) {
		t.Helper()
		raw, ok := rep.Steps[name]
		if !ok {
			t.Fatalf("step %s missing", name)
		}
		if err := json.Unmarshal(raw, v); err != nil {
			t.Fatalf("step %s: %v: %s", name, err, raw)
		}
		var thrown struct {
			Thrown  string `json:"thrown"`
			Message string `json:"message"`
		}
		_ = json.Unmarshal(raw, &thrown)
		if thrown.Thrown != "" && name != "wrongKey" {
			t.Errorf("step %s threw %s: %s", name, thrown.Thrown, thrown.Message)
		}
	}

	var create struct{ SandboxID string }
	step("create", &create)
	if create.SandboxID == "" {
		t.Fatal("no sandbox id")
	}

	var run struct {
		First any
		Text  string
	}
	step("runCode", &run)
	if run.First != nil || run.Text != "42" {
		t.Errorf("runCode: got %+v, want text 42", run)
	}

	var out struct{ CallbackLines, Logs []string }
	step("onStdout", &out)
	if got := strings.Join(out.CallbackLines, ""); got != "line 0\nline 1\nline 2\n" {
		t.Errorf("onStdout callback lines = %q", out.CallbackLines)
	}

	var exErr struct{ Name, Value, Traceback string }
	step("error", &exErr)
	if exErr.Name != "ZeroDivisionError" || !strings.Contains(exErr.Traceback, "return 1/0") {
		t.Errorf("1/0: error %+v, want ZeroDivisionError with the cell's line in its traceback", exErr)
	}

	var fig struct {
		PNGPrefix string
		Error     *string
	}
	step("figure", &fig)
	if fig.PNGPrefix != "89504e47" {
		t.Errorf("matplotlib figure: %+v, want a PNG result", fig)
	}

	var cc struct {
		Text, Leaked string
		Listed       bool
	}
	step("context", &cc)
	if cc.Text != "in context" || cc.Leaked != "False" || !cc.Listed {
		t.Errorf("code context: %+v", cc)
	}

	var files struct {
		Read          string
		Names         []string
		MissingExists bool
	}
	step("files", &files)
	if files.Read != "hello file" || !slices.Contains(files.Names, "a.txt") || files.MissingExists {
		t.Errorf("files: %+v", files)
	}

	var signed struct {
		UpStatus, DownStatus, TamperedStatus, UnsignedStatus, BareStatus int
		Body, BareBody                                                   string
	}
	step("signedUrls", &signed)
	if signed.UpStatus != 200 || signed.DownStatus != 200 || signed.Body != "uploaded via url" || signed.TamperedStatus != 401 || signed.UnsignedStatus != 401 ||
		signed.BareStatus != 400 || !strings.Contains(signed.BareBody, "E2b-Sandbox-Id") {
		t.Errorf("signed URLs: %+v", signed)
	}

	var cmds struct {
		Stdout   string
		ExitCode int
		Failed   *struct {
			ExitCode           int
			Stderr             string
			IsCommandExitError bool
		}
	}
	step("commands", &cmds)
	if cmds.Stdout != "hi\n" || cmds.ExitCode != 0 {
		t.Errorf("commands.run(echo hi): %+v", cmds)
	}
	if cmds.Failed == nil || !cmds.Failed.IsCommandExitError || cmds.Failed.ExitCode != 3 || cmds.Failed.Stderr != "oops\n" {
		t.Errorf("commands.run(exit 3): %+v", cmds.Failed)
	}

	var gh struct {
		Host, Body string
		Status     int
	}
	step("getHost", &gh)
	if gh.Status != 200 || gh.Body != "hello file" || !strings.HasPrefix(gh.Host, "8000-"+create.SandboxID+".") {
		t.Errorf("getHost(8000): %+v", gh)
	}

	var list struct {
		IDs, OtherIDs []string
		State         string
	}
	step("list", &list)
	if !slices.Equal(list.IDs, []string{create.SandboxID}) || len(list.OtherIDs) != 0 || list.State != "running" {
		t.Errorf("list by metadata: %+v, want only %s", list, create.SandboxID)
	}

	var info struct {
		EndInSeconds int
		TemplateID   string
		Metadata     map[string]string
		State        string
		EnvdVersion  string
		CPUCount     int
	}
	step("setTimeout", &info)
	if info.EndInSeconds < 50 || info.EndInSeconds > 61 {
		t.Errorf("after setTimeout(60s) the sandbox ends in %ds", info.EndInSeconds)
	}
	if info.TemplateID != "code-interpreter-v1" || info.Metadata["suite"] != "e2bjs" || info.Metadata["note"] != "a&b=c d/é" ||
		info.State != "running" || info.EnvdVersion != EnvdVersion || info.CPUCount < 1 {
		t.Errorf("getInfo: %+v", info)
	}
	if _, leaked := info.Metadata[tagTemplate]; leaked {
		t.Errorf("getInfo leaks the server's reserved tags: %v", info.Metadata)
	}

	var conn struct{ Text string }
	step("connect", &conn)
	if conn.Text != "80" {
		t.Errorf("connect then runCode: %+v", conn)
	}

	var kill struct {
		Running, First, Second, RunningAfter bool
		GetInfoAfter                         *struct{ IsNotFound bool }
		RunAfter                             *struct{ Thrown string }
	}
	step("kill", &kill)
	if !kill.Running || !kill.First || kill.Second || kill.RunningAfter {
		t.Errorf("kill: %+v, want running, kill true, second kill false, not running after", kill)
	}
	if kill.GetInfoAfter == nil || !kill.GetInfoAfter.IsNotFound {
		t.Errorf("getInfo of a killed sandbox: %+v, want SandboxNotFoundError", kill.GetInfoAfter)
	}
	if kill.RunAfter == nil || kill.RunAfter.Thrown == "" {
		t.Errorf("runCode in a killed sandbox did not throw: %+v", kill.RunAfter)
	}

	var wrong struct {
		Thrown                string
		IsAuthenticationError bool
	}
	step("wrongKey", &wrong)
	if !wrong.IsAuthenticationError {
		t.Errorf("wrong API key: %+v, want AuthenticationError", wrong)
	}
	if left := s.Created(); len(left) != 0 {
		t.Errorf("the server still tracks %v after the SDK killed them", left)
	}
}

func lastLine(b []byte) []byte {
	b = bytes.TrimSpace(b)
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		return b[i+1:]
	}
	return b
}
