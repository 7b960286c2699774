package interpreter_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/code-sandboxes/code-sandboxes/interpreter/lm"
)

// turn is one scripted answer of the fake model.
type turn struct {
	expect    string // the last tool result must contain this
	wantImage bool   // and come with a PNG image
	code      string // answer with an execute_code call running this…
	text      string // …or with this final text
}

// fakeModel is a scripted model server on loopback that speaks the real wire
// format of the OpenAI chat-completions API or of the Anthropic Messages API:
// requests are checked as the real API would see them, and responses are the
// real response envelopes of testdata/ with only the content replaced.
type fakeModel struct {
	t        *testing.T
	provider string // openai or anthropic
	turns    []turn
	repeat   bool   // keep answering with the last turn
	tool     string // the tool's name ("" = execute_code)
	lastBody string // the last request, as sent

	mu       sync.Mutex
	n        int
	lastID   string
	problems []string
	srv      *httptest.Server
}

const testKey = "test-key"

func (f *fakeModel) toolName() string {
	if f.tool == "" {
		return "execute_code"
	}
	return f.tool
}

func newFakeModel(t *testing.T, provider string, turns ...turn) *fakeModel {
	f := &fakeModel{t: t, provider: provider, turns: turns}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// client returns an lm.Client of the real SDK pointed at the fake server.
func (f *fakeModel) client(t *testing.T) lm.Client {
	t.Helper()
	var c lm.Client
	var err error
	switch f.provider {
	case "openai":
		c, err = lm.NewOpenAI(lm.OpenAIConfig{APIKey: testKey, BaseURL: f.srv.URL + "/v1", Model: "gpt-4o", MaxRetries: -1})
	case "anthropic":
		c, err = lm.NewAnthropic(lm.AnthropicConfig{APIKey: testKey, BaseURL: f.srv.URL, Model: "claude-haiku-4-5-20251001", MaxRetries: -1})
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (f *fakeModel) check() {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.problems {
		f.t.Error("model server: " + p)
	}
}

func (f *fakeModel) calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

func fixture(name string) map[string]any {
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		panic(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		panic(fmt.Sprintf("%s: %v", name, err))
	}
	return m
}

func (f *fakeModel) fail(w http.ResponseWriter, format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	f.problems = append(f.problems, msg)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	if f.provider == "openai" {
		_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error", "param": nil, "code": nil}})
	} else {
		_ = json.NewEncoder(w).Encode(map[string]any{"type": "error", "error": map[string]any{"type": "invalid_request_error", "message": msg}})
	}
}

func (f *fakeModel) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	body, err := io.ReadAll(io.LimitReader(r.Body, 32<<20))
	if err != nil {
		f.fail(w, "reading the request: %v", err)
		return
	}
	f.lastBody = string(body)
	var req map[string]any
	if err := json.Unmarshal(body, &req); err != nil {
		f.fail(w, "the request is not JSON: %v", err)
		return
	}
	var toolText string
	var hasImage bool
	switch f.provider {
	case "openai":
		if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
			f.fail(w, "unexpected %s %s", r.Method, r.URL.Path)
			return
		}
		if r.Header.Get("Authorization") != "Bearer "+testKey {
			f.fail(w, "bad Authorization header %q", r.Header.Get("Authorization"))
			return
		}
		toolText, hasImage, err = f.openaiRequest(req)
	case "anthropic":
		if r.Method != http.MethodPost || r.URL.Path != "/v1/messages" {
			f.fail(w, "unexpected %s %s", r.Method, r.URL.Path)
			return
		}
		// SDK v2 sends the key as a bearer token; v1 sent x-api-key.
		keyOK := r.Header.Get("X-Api-Key") == testKey || r.Header.Get("Authorization") == "Bearer "+testKey
		if !keyOK || r.Header.Get("Anthropic-Version") == "" {
			f.fail(w, "bad headers: x-api-key %q, authorization %q, anthropic-version %q", r.Header.Get("X-Api-Key"), r.Header.Get("Authorization"), r.Header.Get("Anthropic-Version"))
			return
		}
		toolText, hasImage, err = f.anthropicRequest(req)
	}
	if err != nil {
		f.fail(w, "call %d: %v", f.n+1, err)
		return
	}
	i := f.n
	if i >= len(f.turns) {
		if !f.repeat {
			f.fail(w, "call %d: the script has only %d turns", i+1, len(f.turns))
			return
		}
		i = len(f.turns) - 1
	}
	tn := f.turns[i]
	f.n++
	if tn.expect != "" && !strings.Contains(toolText, tn.expect) {
		f.fail(w, "call %d: the last tool result should contain %q; it is %q", f.n, tn.expect, toolText)
		return
	}
	if tn.wantImage && !hasImage {
		f.fail(w, "call %d: expected a PNG image of the figure with the tool result", f.n)
		return
	}
	var resp map[string]any
	switch {
	case f.provider == "openai" && tn.code != "":
		resp = fixture("openai_tool_call.json")
		f.lastID = fmt.Sprintf("call_%02dXyZ", f.n)
		args, _ := json.Marshal(map[string]string{"code": tn.code})
		tc := resp["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["tool_calls"].([]any)[0].(map[string]any)
		tc["id"] = f.lastID
		tc["function"] = map[string]any{"name": f.toolName(), "arguments": string(args)}
	case f.provider == "openai":
		resp = fixture("openai_text.json")
		resp["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"] = tn.text
		f.lastID = ""
	case tn.code != "":
		resp = fixture("anthropic_tool_use.json")
		f.lastID = fmt.Sprintf("toolu_%02dAbC", f.n)
		resp["content"] = []any{
			map[string]any{"type": "text", "text": "Let me run some code."},
			map[string]any{"type": "tool_use", "id": f.lastID, "name": f.toolName(), "input": map[string]any{"code": tn.code}},
		}
	default:
		resp = fixture("anthropic_text.json")
		resp["content"].([]any)[0].(map[string]any)["text"] = tn.text
		f.lastID = ""
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

func asList(v any) []any { l, _ := v.([]any); return l }
func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// openaiRequest checks a chat-completions request and returns the last tool
// message's content and whether a PNG follows it.
func (f *fakeModel) openaiRequest(req map[string]any) (string, bool, error) {
	if req["model"] != "gpt-4o" {
		return "", false, fmt.Errorf("model %v", req["model"])
	}
	tools := asList(req["tools"])
	if len(tools) != 1 || asMap(asMap(tools[0])["function"])["name"] != f.toolName() || asMap(tools[0])["type"] != "function" {
		return "", false, fmt.Errorf("tools: %v", req["tools"])
	}
	msgs := asList(req["messages"])
	if len(msgs) < 2 || asMap(msgs[0])["role"] != "system" || asMap(msgs[1])["role"] != "user" {
		return "", false, fmt.Errorf("the conversation must start with system and user messages")
	}
	if f.lastID == "" {
		return "", false, nil
	}
	last := -1
	for i, m := range msgs {
		if asMap(m)["role"] == "tool" {
			last = i
		}
	}
	if last < 1 {
		return "", false, fmt.Errorf("no tool message answers %s", f.lastID)
	}
	tm := asMap(msgs[last])
	if tm["tool_call_id"] != f.lastID {
		return "", false, fmt.Errorf("the tool message answers %v, not %s", tm["tool_call_id"], f.lastID)
	}
	prev := asMap(msgs[last-1])
	if prev["role"] != "assistant" || len(asList(prev["tool_calls"])) == 0 || asMap(asList(prev["tool_calls"])[0])["id"] != f.lastID {
		return "", false, fmt.Errorf("the assistant's tool call was not echoed before its result")
	}
	text, _ := tm["content"].(string)
	img := false
	for _, m := range msgs[last+1:] {
		for _, part := range asList(asMap(m)["content"]) {
			if u, _ := asMap(asMap(part)["image_url"])["url"].(string); strings.HasPrefix(u, "data:image/png;base64,") {
				img = true
			}
		}
	}
	return text, img, nil
}

// anthropicRequest checks a Messages request and returns the text of the
// last tool_result and whether it carries a PNG.
func (f *fakeModel) anthropicRequest(req map[string]any) (string, bool, error) {
	if req["model"] != "claude-haiku-4-5-20251001" || req["max_tokens"] == nil {
		return "", false, fmt.Errorf("model %v, max_tokens %v", req["model"], req["max_tokens"])
	}
	tools := asList(req["tools"])
	if len(tools) != 1 || asMap(tools[0])["name"] != f.toolName() || asMap(asMap(tools[0])["input_schema"])["type"] != "object" {
		return "", false, fmt.Errorf("tools: %v", req["tools"])
	}
	if len(asList(req["system"])) != 1 {
		return "", false, fmt.Errorf("system: %v", req["system"])
	}
	msgs := asList(req["messages"])
	for i, m := range msgs {
		want := "user"
		if i%2 == 1 {
			want = "assistant"
		}
		if asMap(m)["role"] != want {
			return "", false, fmt.Errorf("message %d has role %v; roles must alternate from user", i, asMap(m)["role"])
		}
	}
	if f.lastID == "" {
		return "", false, nil
	}
	if len(msgs) < 3 {
		return "", false, fmt.Errorf("no tool_result follows the tool_use")
	}
	echoed := false
	for _, b := range asList(asMap(msgs[len(msgs)-2])["content"]) {
		echoed = echoed || (asMap(b)["type"] == "tool_use" && asMap(b)["id"] == f.lastID)
	}
	if !echoed {
		return "", false, fmt.Errorf("the assistant's tool_use %s was not echoed before its result", f.lastID)
	}
	last := asMap(msgs[len(msgs)-1])
	var text string
	img := false
	found := false
	for _, b := range asList(last["content"]) {
		bm := asMap(b)
		if bm["type"] != "tool_result" || bm["tool_use_id"] != f.lastID {
			continue
		}
		found = true
		for _, c := range asList(bm["content"]) {
			cm := asMap(c)
			switch cm["type"] {
			case "text":
				text += cm["text"].(string)
			case "image":
				src := asMap(cm["source"])
				img = img || (src["type"] == "base64" && src["media_type"] == "image/png" && src["data"] != "")
			}
		}
	}
	if !found {
		return "", false, fmt.Errorf("no tool_result for %s in the last user message", f.lastID)
	}
	return text, img, nil
}
