//go:build !localonly

package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/code-sandboxes/code-sandboxes/sandboxestest"
)

// TestInterpretCLI drives `interpret` against a two-turn scripted
// chat-completions server (real response envelopes from
// interpreter/testdata): a plot, then an answer linking it.
func TestInterpretCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("creates a sandbox")
	}
	sandboxestest.Require(t, exec.Command("/usr/bin/python3", "-c", "import numpy, matplotlib").Run() == nil,
		"the sandbox's /usr/bin/python3 needs numpy and matplotlib (make deps)")
	load := func(name string) map[string]any {
		b, err := os.ReadFile(filepath.Join("..", "..", "interpreter", "testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	code := "import matplotlib.pyplot as plt\nplt.hist([1, 2, 2, 3, 3, 3])\nplt.savefig('/files/hist.png')\nprint('saved')"
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		n++
		var resp map[string]any
		msg := func(m map[string]any) map[string]any {
			return m["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
		}
		if n == 1 {
			resp = load("openai_tool_call.json")
			args, _ := json.Marshal(map[string]string{"code": code})
			msg(resp)["tool_calls"].([]any)[0].(map[string]any)["function"] = map[string]any{"name": "execute_code", "arguments": string(args)}
		} else {
			if !bytes.Contains(body, []byte(`saved`)) {
				t.Errorf("the second request lacks the tool output: %.300s", body)
			}
			resp = load("openai_text.json")
			msg(resp)["content"] = "Done: [hist.png](sandbox:/files/hist.png)"
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(resp)
	}))
	defer srv.Close()

	out := t.TempDir()
	cmd := interpretCmd()
	var stdout, stderr bytes.Buffer
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	cmd.SetArgs([]string{"--provider", "openai", "--base-url", srv.URL + "/v1", "--api-key", "k", "--model", "gpt-4o",
		"--runtime-dir", t.TempDir(), "--out", out, "Plot a histogram"})
	if err := cmd.Execute(); err != nil {
		t.Fatalf("interpret: %v (stderr %s)", err, stderr.String())
	}
	if strings.TrimSpace(stdout.String()) != "Done: [hist.png](sandbox:/files/hist.png)" {
		t.Errorf("stdout %q", stdout.String())
	}
	b, err := os.ReadFile(filepath.Join(out, "hist.png"))
	if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Errorf("saved attachment: %v", err)
	}
	if !strings.Contains(stderr.String(), "attachment saved: "+filepath.Join(out, "hist.png")) {
		t.Errorf("stderr %q", stderr.String())
	}
}
