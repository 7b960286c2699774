package e2bserver

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// runSDKScript runs one of e2e/e2bjs's scripts against a fresh serve and
// returns its report's steps; a step that threw fails the test.
func runSDKScript(t *testing.T, script string) func(name string, v any) {
	t.Helper()
	needSandboxes(t)
	node, npm := needNode(t)
	npmCI(t, npm)
	_, url := testServer(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rep := runNodeScript(ctx, t, node, script, url)
	return func(name string, v any) {
		t.Helper()
		raw, ok := rep.Steps[name]
		if !ok {
			t.Fatalf("step %s missing", name)
		}
		var thrown struct{ Thrown, Message string }
		_ = json.Unmarshal(raw, &thrown)
		if thrown.Thrown != "" && name != "killedDuringRun" {
			t.Errorf("step %s threw %s: %s", name, thrown.Thrown, thrown.Message)
		}
		if err := json.Unmarshal(raw, v); err != nil {
			t.Fatalf("step %s: %v: %s", name, err, raw)
		}
	}
}

// Issue #14 through the official SDK: IPython cells, envd 0.6.x files API,
// and an execution cut off by a kill.
func TestOfficialJSSDKCompat(t *testing.T) {
	step := runSDKScript(t, "compat.test.mjs")

	var ip struct {
		Bang, Assign, Bash, Dedent, Cd, Pwd, Env, TimeText, TimeOut, Writefile, Hist, Awaited string
		BadError                                                                              *string
		Errors                                                                                []*string
	}
	step("ipython", &ip)
	for i, e := range ip.Errors {
		if e != nil {
			t.Errorf("ipython cell %d failed with %s", i, *e)
		}
	}
	for name, c := range map[string][2]string{
		"!cmd":       {ip.Bang, "hi from bang\n"},
		"x = !cmd":   {ip.Assign, "['a', 'b']"},
		"%%bash":     {ip.Bash, "from bash 42\n"},
		"dedent":     {ip.Dedent, "10"},
		"%cd":        {ip.Cd, "/tmp\n"},
		"!pwd":       {ip.Pwd, "/tmp\n"},
		"%env":       {ip.Env, "1"},
		"%time":      {ip.TimeText, "42"},
		"%writefile": {ip.Writefile, `written\n`},
		"_ and Out":  {ip.Hist, "('written\\n', True)"},
		"await":      {ip.Awaited, "awaited"},
	} {
		if c[0] != c[1] {
			t.Errorf("%s: got %q, want %q", name, c[0], c[1])
		}
	}
	if !strings.Contains(ip.TimeOut, "Wall time") {
		t.Errorf("%%time printed %q", ip.TimeOut)
	}
	if ip.BadError == nil || *ip.BadError != "UsageError" {
		t.Errorf("unknown magic: error %v, want UsageError", ip.BadError)
	}

	var charts map[string]json.RawMessage
	step("charts", &charts)
	for name, typ := range map[string]string{"line": "line", "scatter": "scatter", "bar": "bar", "pie": "pie", "box": "box_and_whisker", "superchart": "superchart", "unknown": "unknown"} {
		var c struct {
			Error *string
			PNG   bool
			Chart *struct {
				Type     string
				Title    *string
				Elements []json.RawMessage
			}
		}
		if err := json.Unmarshal(charts[name], &c); err != nil {
			t.Fatalf("chart %s: %v", name, err)
		}
		if c.Error != nil || !c.PNG || c.Chart == nil || c.Chart.Type != typ {
			t.Errorf("%s figure: %s", name, charts[name])
			continue
		}
		if typ != "unknown" && len(c.Chart.Elements) == 0 {
			t.Errorf("%s chart has no elements: %s", name, charts[name])
		}
	}
	var data map[string][]any
	if err := json.Unmarshal(charts["data"], &data); err != nil || !reflect.DeepEqual(data, map[string][]any{"a": {1.0, 2.0}, "b": {"x", nil}}) {
		t.Errorf("DataFrame result.data: %s", charts["data"])
	}

	var langs struct {
		JS, JSState, JSAwait, JSEnv, R, Bash, ContextLanguage, InContext string
		JSError, RError, BashError                                       *string
		Listed                                                           []string
		Refused                                                          *struct{ Thrown, Message string }
	}
	step("languages", &langs)
	if langs.JS != "hi from js\n" || langs.JSState != "11" || langs.JSAwait != "y.txt" || langs.JSEnv != "scoped" ||
		langs.JSError == nil || *langs.JSError != "ReferenceError" || langs.Bash != "42\n" || langs.BashError != nil ||
		langs.ContextLanguage != "javascript" || langs.InContext != "undefined" || langs.R != "[1] 42" || langs.RError != nil {
		t.Errorf("languages: %+v", langs)
	}
	if !slices.Contains(langs.Listed, "python") || !slices.Contains(langs.Listed, "javascript") {
		t.Errorf("listed context languages %v, want python and javascript (E2B's defaults)", langs.Listed)
	}
	// The SDK shows only the status line; the body (our agent's reason,
	// checked in internal/agent's tests) is not in its message.
	if langs.Refused == nil || langs.Refused.Thrown != "SandboxError" || !strings.Contains(langs.Refused.Message, "400") {
		t.Errorf("language cobol: %+v, want a 400 refusal", langs.Refused)
	}

	// Writable root, the user root (uid 0 of the sandbox's nested user
	// namespace: serve runs as root here), TypeScript on any node.
	var root struct {
		Top, TopRead, Mk, ID, Sudo, RootRead, Owner, Agent, TS, TSCwd, CtxCwd, InRoot string
		TSError                                                                       *string
	}
	step("root", &root)
	if root.Top != "/cs_top/f.txt" || root.TopRead != "top" || root.Mk != "user\n" {
		t.Errorf("writable root: %+v", root)
	}
	if root.ID != "0\nroot\n/root\n/home/user\n" || root.Sudo != "via sudo x\n" || root.RootRead != "root data" || root.Owner != "root\n" {
		t.Errorf("user root: %+v", root)
	}
	if root.Agent != "CommandExitError" {
		t.Errorf("root's kill -9 1: %q, want it refused (CommandExitError)", root.Agent)
	}
	if root.TS != "ts 42\n" || root.TSError != nil || root.TSCwd != "/home/user" {
		t.Errorf("typescript: %+v", root)
	}
	if root.CtxCwd != "/root" || root.InRoot != "/root" {
		t.Errorf("context with cwd /root: %+v", root)
	}
	var rf struct {
		AsUser *string
		List   []string
		Info   struct {
			Owner, Type string
			Size        int
		}
		Exists      bool
		Events      []string
		Made        bool
		MadeOwner   string
		Moved       string
		After       []string
		RootTop     []string
		Refused     map[string]*string
		RaceEntries int
		Intact      string
	}
	step("rootFiles", &rf)
	if rf.AsUser == nil {
		t.Errorf("the user listed root's 0700 directory")
	}
	if !slices.Equal(rf.List, []string{"f:root"}) || rf.Info.Owner != "root" || rf.Info.Size != 2 || !rf.Exists {
		t.Errorf("list/getInfo/exists as root: %+v", rf)
	}
	if !slices.ContainsFunc(rf.Events, func(e string) bool { return strings.HasSuffix(e, ":g") }) {
		t.Errorf("watch as root saw %q, want an event for g", rf.Events)
	}
	if !rf.Made || rf.MadeOwner != "root\n" || rf.Moved != "/root/secret/sub/g2" ||
		!slices.Equal(rf.After, []string{"/root/secret/sub", "/root/secret/sub/deep", "/root/secret/sub/g2"}) {
		t.Errorf("makeDir/rename/remove as root: %+v", rf)
	}
	for _, name := range rf.RootTop {
		if name != "secret" && name != "proclink" && name != "as-root.txt" && name != "race" && !strings.HasPrefix(name, ".") {
			t.Errorf("root's /root lists %q: not the sandbox's own (%q)", name, rf.RootTop)
		}
	}
	for _, k := range []string{"mkdirEtc", "removeUsr", "moveUsr", "dotdot", "listProc", "listProcLink", "statProcEnv", "watchProc", "removeSlash"} {
		if e, ok := rf.Refused[k]; !ok || e == nil {
			t.Errorf("as root, %s was not refused", k)
		}
	}
	if rf.RaceEntries != 0 || rf.Intact != "intact\n" {
		t.Errorf("root listed %d entries through a flipping symlink to the agent's fds; system dirs: %q", rf.RaceEntries, rf.Intact)
	}
	var exp struct {
		Status int
		Body   map[string]any
	}
	step("expiredUrl", &exp)
	if exp.Status != 401 || !reflect.DeepEqual(exp.Body, map[string]any{"code": 401.0, "message": "signature is already expired"}) {
		t.Errorf("expired signed URL: %+v", exp)
	}

	var version string
	step("envdVersion", &version)
	if version != EnvdVersion {
		t.Errorf("envdVersion %q, want %q", version, EnvdVersion)
	}

	var md struct {
		Written, Stat, Overwritten, After map[string]string
		Invalid                           *string
	}
	step("metadata", &md)
	want := map[string]string{"author": "cs", "purpose": "test"}
	if !reflect.DeepEqual(md.Written, want) || !reflect.DeepEqual(md.Stat, want) || md.Overwritten != nil || md.After != nil {
		t.Errorf("metadata: %+v", md)
	}
	if md.Invalid == nil || *md.Invalid != "InvalidArgumentError" {
		t.Errorf("invalid metadata: %v, want InvalidArgumentError", md.Invalid)
	}

	var w struct {
		Events []struct {
			Name, Type string
			Entry      *struct {
				Name string
				Size int
			}
		}
	}
	step("watch", &w)
	// inotify may merge the uploads' writes into one event; the last one
	// must show the second upload's size.
	lastWrite := -1
	for _, e := range w.Events {
		if e.Name != "up.txt" {
			t.Errorf("watch saw %q: uploads must not show temporary names (%+v)", e.Name, w.Events)
		}
		if e.Type == "write" {
			if e.Entry == nil || e.Entry.Name != "up.txt" {
				t.Errorf("write event without its entry: %+v", e)
				continue
			}
			lastWrite = e.Entry.Size
		}
	}
	if lastWrite != 7 {
		t.Errorf("want write events on up.txt, the last with size 7: %+v", w.Events)
	}

	var killed struct{ Thrown, Message string }
	step("killedDuringRun", &killed)
	if killed.Thrown != "TimeoutError" || !strings.Contains(killed.Message, "killed while the request was in progress") {
		t.Errorf("runCode in a sandbox killed mid-run: %+v", killed)
	}
}
