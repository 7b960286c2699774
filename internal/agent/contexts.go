package agent

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"

	"github.com/code-sandboxes/code-sandboxes/internal/kernel"
)

// maxContexts bounds how many kernels one sandbox may hold: each is a python
// process, and a client looping over CreateContext must not exhaust the
// sandbox's pids and memory behind the user's back.
const maxContexts = 64

type codeContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`

	session *kernel.Session
}

type contextTable struct {
	mu       sync.Mutex
	byID     map[string]*codeContext
	order    []string
	defaults map[string]string // language -> id of its default context
	// newSess starts a context's kernel, or says why the language can't run.
	newSess func(language, cwd string) (*kernel.Session, error)
}

func newContextTable(newSess func(language, cwd string) (*kernel.Session, error)) *contextTable {
	return &contextTable{byID: map[string]*codeContext{}, defaults: map[string]string{}, newSess: newSess}
}

// normalizeLanguage follows E2B's server: lower-case, trimmed, js -> javascript,
// ts -> typescript, empty -> python.
func normalizeLanguage(l string) string {
	l = strings.ToLower(strings.TrimSpace(l))
	switch l {
	case "", "py", "python3":
		return "python"
	case "js":
		return "javascript"
	case "ts":
		return "typescript"
	case "sh", "shell":
		return "bash"
	}
	return l
}

var errUnsupportedLanguage = fmt.Errorf("unsupported language")
var errTooManyContexts = fmt.Errorf("too many contexts")

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	s := hex.EncodeToString(b[:])
	return s[0:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:32]
}

func (t *contextTable) create(language, cwd string) (*codeContext, error) {
	language = normalizeLanguage(language)
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.byID) >= maxContexts {
		return nil, fmt.Errorf("%w: the limit is %d per sandbox; delete one first", errTooManyContexts, maxContexts)
	}
	sess, err := t.newSess(language, cwd)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errUnsupportedLanguage, err)
	}
	c := &codeContext{ID: newID(), Language: language, Cwd: cwd, session: sess}
	t.byID[c.ID] = c
	t.order = append(t.order, c.ID)
	return c, nil
}

func (t *contextTable) get(id string) *codeContext {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.byID[id]
}

// defaultFor returns the default context of a language, creating it on first use.
func (t *contextTable) defaultFor(language, cwd string) (*codeContext, error) {
	language = normalizeLanguage(language)
	t.mu.Lock()
	if id, ok := t.defaults[language]; ok {
		if c := t.byID[id]; c != nil {
			t.mu.Unlock()
			return c, nil
		}
	}
	t.mu.Unlock()
	c, err := t.create(language, cwd)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if id, ok := t.defaults[language]; ok && t.byID[id] != nil {
		// Lost a race with another request: keep theirs, drop ours.
		t.removeLocked(c.ID)
		go c.session.Close()
		return t.byID[id], nil
	}
	t.defaults[language] = c.ID
	// Default contexts list first, as if they existed from the start (E2B's
	// do); a context created before this one was asked for stays last.
	for i, id := range t.order {
		if id == c.ID {
			t.order = append(t.order[:i], t.order[i+1:]...)
			break
		}
	}
	lead := 0
	for lead < len(t.order) && t.isDefaultLocked(t.order[lead]) {
		lead++
	}
	t.order = append(t.order[:lead], append([]string{c.ID}, t.order[lead:]...)...)
	return c, nil
}

func (t *contextTable) isDefaultLocked(id string) bool {
	for _, d := range t.defaults {
		if d == id {
			return true
		}
	}
	return false
}

func (t *contextTable) list() []*codeContext {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*codeContext, 0, len(t.order))
	for _, id := range t.order {
		out = append(out, t.byID[id])
	}
	return out
}

func (t *contextTable) removeLocked(id string) *codeContext {
	c := t.byID[id]
	if c == nil {
		return nil
	}
	delete(t.byID, id)
	for i, o := range t.order {
		if o == id {
			t.order = append(t.order[:i], t.order[i+1:]...)
			break
		}
	}
	for l, d := range t.defaults {
		if d == id {
			delete(t.defaults, l)
		}
	}
	return c
}

func (t *contextTable) remove(id string) *codeContext {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.removeLocked(id)
}

func (t *contextTable) closeAll() {
	t.mu.Lock()
	all := make([]*codeContext, 0, len(t.byID))
	for _, c := range t.byID {
		all = append(all, c)
	}
	t.byID = map[string]*codeContext{}
	t.order = nil
	t.defaults = map[string]string{}
	t.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range all {
		wg.Add(1)
		go func() { defer wg.Done(); _ = c.session.Close() }()
	}
	wg.Wait()
}
