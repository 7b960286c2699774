package console_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/code-sandboxes/code-sandboxes/internal/testdep"
)

// chromiumPath finds Debian's chromium (scripts/install-deps.sh).
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	testdep.Require(t, false, "a headless Chromium (apt-get install chromium; scripts/install-deps.sh)")
	return ""
}

// shots saves screenshots to $CONSOLE_SCREENSHOTS (a CI artifact), else
// to the test's temporary directory.
func shotsDir(t *testing.T) string {
	if d := os.Getenv("CONSOLE_SCREENSHOTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// TestConsoleInBrowser drives the console in a real headless Chromium
// against a real serve with real sandboxes: sign in, see a sandbox that an
// SDK created appear, run a command and read its output, watch the memory
// chart rise after allocating 200 MB, upload and download a file, kill the
// sandbox; another team sees none of it. Screenshots of every page.
func TestConsoleInBrowser(t *testing.T) {
	needSandboxes(t)
	chromium := chromiumPath(t)
	base := startServe(t)
	dir := shotsDir(t)
	t.Logf("screenshots in %s", dir)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.WindowSize(1280, 900),
		chromedp.DisableGPU, chromedp.Flag("disable-dev-shm-usage", true))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root with its sandbox
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	if err := chromedp.Do(bctx); err != nil { // start the browser, without a timeout (see chromedp.Run)
		t.Fatalf("starting chromium: %v", err)
	}
	ctx, cancel := context.WithTimeout(bctx, 4*time.Minute)
	defer cancel()

	step := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, scancel := context.WithTimeout(ctx, 45*time.Second)
		defer scancel()
		if err := chromedp.Do(sctx, steps...); err != nil {
			loc, _ := chromedp.Run(ctx, chromedp.Location())
			html, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText.slice(-1500) : ""`))
			t.Fatalf("%s: %v (at %s: %s)", what, err, loc, html)
		}
	}
	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// waitJS waits until expr is true in the page, through navigations
	// (a form's answer replaces the page under the poll).
	waitJS := func(what, expr string) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			if ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr)); err == nil && ok {
				return
			}
			if time.Now().After(deadline) {
				loc, _ := chromedp.Run(ctx, chromedp.Location())
				html, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText.slice(-1500) : ""`))
				t.Fatalf("%s: %s stayed false (at %s: %s)", what, expr, loc, html)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	text := func(sel string) string {
		t.Helper()
		tctx, tcancel := context.WithTimeout(ctx, 10*time.Second)
		defer tcancel()
		s, err := chromedp.Run(tctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("reading %s: %v", sel, err)
		}
		return s
	}

	// Sign in: / leads to the sign-in page.
	step("open the console", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#key")))
	shot("01-sign-in")
	step("sign in", chromedp.SendKeys(chromedp.CSS("#key"), keyA), chromedp.Submit(chromedp.CSS("#key")), chromedp.WaitVisible(chromedp.CSS("#sandboxes")))
	if got := text("#team"); got != "team-a" {
		t.Fatalf("signed in as %q, want team-a", got)
	}
	if c, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.cookie`)); c != "" {
		t.Errorf("the session cookie is readable by script: %q", c)
	}

	// A sandbox created through the API appears by the page's live update.
	id := createSandbox(t, base, keyA)
	row := fmt.Sprintf(`#sandboxes tr[data-id="%s"]`, id)
	step("see the sandbox appear", chromedp.WaitVisible(chromedp.CSS(row)))
	if got := text(row); !strings.Contains(got, "running") || !strings.Contains(got, "none") || !strings.Contains(got, "base") {
		t.Errorf("the sandbox's row reads %q, want running, template base, network none", got)
	}
	shot("02-sandboxes")

	// Its page: run a command and read its output.
	// Its link, followed by address: the live update replaces the row's
	// nodes every 3 s, so a click can land on a node just removed.
	href, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('`+row+` a').getAttribute("href")`))
	if err != nil || href != "/console/sandboxes/"+id {
		t.Fatalf("the row's link is %q (%v)", href, err)
	}
	step("open the sandbox", chromedp.Navigate(base+href), chromedp.WaitVisible(chromedp.CSS("#cmd")))
	step("run a command", chromedp.SendKeys(chromedp.CSS("#cmd"), `echo hello-from-the-console; echo "<b>not bold</b>"; id -un`),
		chromedp.Click(chromedp.CSS("#runbtn")))
	waitJS("run a command", `(document.getElementById("output") || {}).textContent?.includes("hello-from-the-console") || false`)
	out := text("#output")
	if !strings.Contains(out, "hello-from-the-console") || !strings.Contains(out, "<b>not bold</b>") {
		t.Errorf("the command's output reads %q", out)
	}
	if got := text("#exit"); !strings.Contains(got, "exit code 0") {
		t.Errorf("the command ended with %q", got)
	}

	// Memory: allocate 200 MB in the sandbox and watch the chart's last
	// sample rise past it.
	step("allocate 200 MB", chromedp.SetValue(chromedp.CSS("#cmd"), `setsid nohup python3 -c "b = b'x' * (200 << 20); import time; time.sleep(120)" >/dev/null 2>&1 & sleep 2; echo started`),
		chromedp.Click(chromedp.CSS("#runbtn")))
	waitJS("allocate 200 MB", `(document.getElementById("output") || {}).textContent === "started\n"`)
	if got := text("#output"); !strings.Contains(got, "started") {
		t.Fatalf("starting the allocation: %q", got)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		v, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("chart").getAttribute("data-mem-last") || "0"`))
		mem, _ := strconv.ParseInt(v, 10, 64)
		if mem >= 200<<20 {
			t.Logf("the chart's memory reads %d MiB", mem>>20)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the chart's memory stayed at %d MiB after allocating 200 MB", mem>>20)
		}
		time.Sleep(time.Second)
	}
	if n, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#cpu-line, #mem-line").length`)); n != 2 {
		t.Errorf("the chart has %d lines, want 2", n)
	}
	// The commands ended (the allocation runs in a session of its own,
	// which envd does not list): the processes section says so.
	if got := text("#h-procs + *"); !strings.Contains(got, "No processes") && !strings.Contains(got, "PID") {
		t.Errorf("the processes section reads %q", got)
	}

	// Upload a file into /tmp, see it listed, download it back.
	upload := filepath.Join(t.TempDir(), "notes <x>.txt")
	content := "uploaded through the console " + strconv.FormatInt(time.Now().UnixNano(), 10)
	if err := os.WriteFile(upload, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	step("open /tmp", chromedp.SetValue(chromedp.CSS("#path"), "/tmp"), chromedp.Submit(chromedp.CSS("#path")),
		chromedp.WaitVisible(chromedp.CSS("#file")))
	step("upload a file", chromedp.SetUploadFiles(chromedp.CSS("#file"), []string{upload}), chromedp.Submit(chromedp.CSS("#file")),
		chromedp.WaitVisible(chromedp.CSS(".notice")))
	if got := text("#files"); !strings.Contains(got, "notes <x>.txt") {
		t.Fatalf("the uploaded file is not listed: %q", got)
	}
	shot("03-sandbox")
	body, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(async () => { const a = [...document.querySelectorAll('#files a[download]')].find(a => a.textContent === "notes <x>.txt"); const r = await fetch(a.href, {credentials: "same-origin"}); return r.status + "|" + r.headers.get("content-type") + "|" + await r.text(); })()`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("downloading: %v", err)
	}
	if body != "200|application/octet-stream|"+content {
		t.Errorf("the download is %q, want the uploaded content", body)
	}

	// The other pages.
	step("templates", chromedp.Navigate(base+"/console/templates"), chromedp.WaitVisible(chromedp.CSS("main h1")))
	shot("04-templates")
	step("snapshots", chromedp.Navigate(base+"/console/snapshots"), chromedp.WaitVisible(chromedp.CSS("main h1")))
	shot("05-snapshots")
	step("usage", chromedp.Navigate(base+"/console/usage"), chromedp.WaitVisible(chromedp.CSS("main table")))
	if got := text("main table"); !strings.Contains(got, "Running sandboxes\t1") {
		t.Errorf("the usage page reads %q, want 1 running sandbox", got)
	}
	shot("05-usage")

	// Another team, in a browser context of its own (no shared cookies),
	// sees none of it.
	bctx2, cancel2 := chromedp.NewContext(bctx, chromedp.WithNewBrowserContext())
	defer cancel2()
	ctx2, cancel2t := context.WithTimeout(bctx2, time.Minute)
	defer cancel2t()
	if err := chromedp.Do(ctx2, chromedp.Navigate(base+"/console/login"), chromedp.SendKeys(chromedp.CSS("#key"), keyB),
		chromedp.Submit(chromedp.CSS("#key")), chromedp.WaitVisible(chromedp.CSS("#sandboxes")), chromedp.Sleep(3500*time.Millisecond)); err != nil {
		t.Fatalf("team B signs in: %v", err)
	}
	if page, _ := chromedp.Run(ctx2, chromedp.Evaluate[string](`document.documentElement.outerHTML`)); strings.Contains(page, id) {
		t.Errorf("team B's sandboxes page shows team A's sandbox")
	}
	status, err := chromedp.Run(ctx2, chromedp.Evaluate[string](`(async () => { const r = await fetch("/console/sandboxes/`+id+`"); return r.status + "|" + (await r.text()).includes("hello-from-the-console"); })()`, chromedp.EvalAwaitPromise))
	if err != nil || status != "404|false" {
		t.Errorf("team B opening team A's sandbox: %q %v, want 404", status, err)
	}
	if err := chromedp.Do(ctx2, chromedp.Navigate(base+"/console/sandboxes/"+id), chromedp.WaitVisible(chromedp.CSS(".error"))); err != nil {
		t.Errorf("team B's view of team A's sandbox: %v", err)
	}
	if png, err := chromedp.Run(ctx2, chromedp.FullScreenshot(100)); err == nil {
		_ = os.WriteFile(filepath.Join(dir, "06-other-team.png"), png, 0o644)
	}

	// Kill it from its page; it leaves the list.
	step("kill", chromedp.Navigate(base+"/console/sandboxes/"+id), chromedp.WaitVisible(chromedp.CSS("#kill")))
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(window.confirm = () => true, true)`)); err != nil {
		t.Fatal(err)
	}
	step("kill", chromedp.Click(chromedp.CSS("#kill")), chromedp.WaitVisible(chromedp.CSS(".notice")))
	if page, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("sandboxes").outerHTML`)); strings.Contains(page, id) {
		t.Errorf("the killed sandbox is still listed")
	}
	shot("07-killed")
	var d struct{}
	if st := apiCall(t, base, keyA, "GET", "/sandboxes/"+id, "", &d); st != 404 {
		t.Errorf("after the kill the API answers %d for the sandbox, want 404", st)
	}

	// Sign out: the pages need a sign-in again.
	step("sign out", chromedp.Click(chromedp.CSS(".signout button")), chromedp.WaitVisible(chromedp.CSS("#key")))
	step("after sign-out", chromedp.Navigate(base+"/console/"), chromedp.WaitVisible(chromedp.CSS("#key")))
}
