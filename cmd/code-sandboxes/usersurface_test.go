package main

import (
	"encoding/json"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/code-sandboxes/code-sandboxes/internal/testdep"
)

// --language runs the code in that language's kernel on exec, repl and
// create; an unknown one is refused with the list before any sandbox is
// made.
func TestLanguageFlag(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	for _, args := range [][]string{{"exec", "-l", "ruby", "1"}, {"create", "--language", "ruby"}, {"repl", "--language", "cobol"}} {
		_, errs, code := cli(t, ":exit\n", args...)
		if code != 1 || !strings.Contains(errs, "use one of python, javascript, typescript, r, java, bash") {
			t.Errorf("%v: %d %q", args, code, errs)
		}
	}
	testdep.Require(t, exec.Command("node", "--version").Run() == nil, "node (make deps)")
	if out, errs, code := cli(t, "", "exec", "--language", "javascript", "console.log(6 * 7)"); code != 0 || strings.TrimSpace(out) != "42" {
		t.Errorf("exec --language javascript: %d %q %q", code, out, errs)
	}
	if out, errs, code := cli(t, "", "exec", "--language", "sh", "echo $((6 * 7))"); code != 0 || strings.TrimSpace(out) != "42" {
		t.Errorf("exec --language sh (bash): %d %q %q", code, out, errs)
	}
	// A block of JavaScript opens on '{' and ends with an empty line.
	out, errs, code := cli(t, "function f(x) {\n  return x * 7\n}\n\nconsole.log(f(6))\n:exit\n", "repl", "--language", "js")
	if code != 0 || !strings.Contains(out, "42") || !strings.Contains(out, "javascript)>>> ") {
		t.Errorf("repl --language js: %d %q %q", code, out, errs)
	}

	out, errs, code = cli(t, "", "create", "--language", "javascript", "--lifetime", "5m")
	id := strings.TrimSpace(out)
	if code != 0 || id == "" {
		t.Fatalf("create --language javascript: %d %q %q", code, out, errs)
	}
	defer cli(t, "", "delete", "-y", id)
	if out, errs, code := cli(t, "", "exec", "--sandbox", id, "--language", "javascript", "const x = 40; console.log(x + 2)"); code != 0 || strings.TrimSpace(out) != "42" {
		t.Errorf("exec --sandbox --language: %d %q %q", code, out, errs)
	}
	// A sandbox that can't run the language (no java in its PATH) is
	// refused at create, and nothing is left running.
	_, errs, code = cli(t, "", "create", "--language", "java", "--env", "PATH=/nonexistent", "--tag", "lang=java")
	if code != 1 || !strings.Contains(errs, "java") || !strings.Contains(errs, "the sandbox was removed") {
		t.Errorf("create --language java without java: %d %q", code, errs)
	}
	if out, _, _ := cli(t, "", "list", "--json", "--tag", "lang=java"); strings.TrimSpace(out) != "[]" {
		t.Errorf("the refused sandbox is still listed: %q", out)
	}
}

// exec --json writes empty lists as [], never null.
func TestExecJSONEmptyLists(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	out, errs, code := cli(t, "", "exec", "--json", "x = 1")
	if code != 0 {
		t.Fatalf("exec --json: %d %q %q", code, out, errs)
	}
	var ex map[string]any
	if err := json.Unmarshal([]byte(out), &ex); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	logs, _ := ex["logs"].(map[string]any)
	for name, v := range map[string]any{"results": ex["results"], "logs.stdout": logs["stdout"], "logs.stderr": logs["stderr"]} {
		if l, ok := v.([]any); !ok || len(l) != 0 {
			t.Errorf("%s = %#v, want []: %s", name, v, out)
		}
	}
}

// environments fits 80 columns and shows every build id whole or as a
// unique prefix (a 64-digit one); -o wide and -o json have them whole.
func TestEnvironmentsOutput(t *testing.T) {
	out, errs, code := cli(t, "", "environments")
	if code != 0 {
		t.Fatalf("environments: %d %q", code, errs)
	}
	for _, l := range strings.Split(out, "\n") {
		if n := utf8.RuneCountInString(l); n > 80 {
			t.Errorf("a line of %d columns: %q", n, l)
		}
	}
	// E2B's template id, cut to "code-interpr" before.
	if !regexp.MustCompile(`(?m)^e2b +e2b-code-interpreter +code-interpreter-v1( |$)`).MatchString(out) {
		t.Errorf("the e2b build id is not whole:\n%s", out)
	}
	js, _, code := cli(t, "", "environments", "-o", "json")
	var res struct {
		Builds []struct {
			ID    string   `json:"id"`
			Names []string `json:"names"`
		} `json:"builds"`
		Environments []struct {
			Variant, Name string
			BuildID       string `json:"build_id"`
		} `json:"environments"`
		Skipped []any `json:"skipped"`
	}
	if code != 0 || json.Unmarshal([]byte(js), &res) != nil || res.Environments == nil || res.Builds == nil || res.Skipped == nil {
		t.Fatalf("-o json: %d %q", code, js)
	}
	wide, _, _ := cli(t, "", "environments", "-o", "wide")
	for _, e := range res.Environments {
		if e.BuildID == "" {
			continue
		}
		if !strings.Contains(wide, " "+e.BuildID+" ") {
			t.Errorf("-o wide lacks the whole build id %s of %s/%s", e.BuildID, e.Variant, e.Name)
		}
		if short := e.BuildID[:min(12, len(e.BuildID))]; !strings.Contains(out, " "+short) {
			t.Errorf("the table lacks %s's build id", e.Name)
		}
	}
	if _, errs, code := cli(t, "", "environments", "-o", "yaml"); code != 1 || !strings.Contains(errs, "table, wide, json") {
		t.Errorf("-o yaml: %d %q", code, errs)
	}
}

func TestShortIDs(t *testing.T) {
	a := strings.Repeat("a", 64)
	b := strings.Repeat("a", 20) + strings.Repeat("b", 44)
	got := shortIDs([]string{a, b, "code-interpreter-v1", strings.Repeat("c", 64)})
	if got[a] != strings.Repeat("a", 21) || got[b] != b[:21] || got["code-interpreter-v1"] != "code-interpreter-v1" || got[strings.Repeat("c", 64)] != strings.Repeat("c", 12) {
		t.Errorf("shortIDs = %v", got)
	}
}
