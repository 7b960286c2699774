package envd

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	fspb "github.com/code-sandboxes/code-sandboxes/internal/envdpb/filesystem"
)

func TestStatMakeDirMoveRemove(t *testing.T) {
	env := newTestEnv(t)
	codecs(t, func(t *testing.T, opts ...connect.ClientOption) {
		c := env.fs(opts...)
		ctx := t.Context()
		base := t.TempDir()
		f := filepath.Join(base, "a.txt")
		os.WriteFile(f, []byte("hello"), 0o640)

		st, err := c.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: f}))
		if err != nil {
			t.Fatal(err)
		}
		e := st.Msg.Entry
		if e.Name != "a.txt" || e.Path != f || e.Type != fspb.FileType_FILE_TYPE_FILE || e.Size != 5 || e.Mode != 0o640 ||
			e.Permissions != "-rw-r-----" || e.Owner == "" || e.Group == "" || e.ModifiedTime.AsTime().IsZero() || e.SymlinkTarget != nil {
			t.Fatalf("stat = %v", e)
		}
		_, err = c.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: filepath.Join(base, "nope")}))
		if connect.CodeOf(err) != connect.CodeNotFound || !strings.Contains(err.Error(), "nope") {
			t.Fatalf("stat missing: %v", err)
		}

		// Symlink to a directory: typed as its target, with symlink_target.
		os.Mkdir(filepath.Join(base, "d"), 0o755)
		os.Symlink(filepath.Join(base, "d"), filepath.Join(base, "link"))
		st, err = c.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: filepath.Join(base, "link")}))
		if err != nil || st.Msg.Entry.Type != fspb.FileType_FILE_TYPE_DIRECTORY || st.Msg.Entry.GetSymlinkTarget() != filepath.Join(base, "d") ||
			st.Msg.Entry.Permissions != "lrwxrwxrwx" {
			t.Fatalf("stat link = %v, %v", st.Msg.GetEntry(), err)
		}

		nested := filepath.Join(base, "x", "y", "z")
		md, err := c.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: nested}))
		if err != nil || md.Msg.Entry.Type != fspb.FileType_FILE_TYPE_DIRECTORY || md.Msg.Entry.Path != nested {
			t.Fatalf("makedir = %v, %v", md, err)
		}
		if _, err = c.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: nested})); connect.CodeOf(err) != connect.CodeAlreadyExists {
			t.Fatalf("makedir existing dir: %v", err)
		}
		if _, err = c.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: f})); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Fatalf("makedir over file: %v", err)
		}

		dst := filepath.Join(base, "moved", "b.txt")
		mv, err := c.Move(ctx, connect.NewRequest(&fspb.MoveRequest{Source: f, Destination: dst}))
		if err != nil || mv.Msg.Entry.Path != dst || mv.Msg.Entry.Name != "b.txt" {
			t.Fatalf("move = %v, %v", mv, err)
		}
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Fatal("source still exists")
		}
		if _, err = c.Move(ctx, connect.NewRequest(&fspb.MoveRequest{Source: f, Destination: dst})); connect.CodeOf(err) != connect.CodeNotFound {
			t.Fatalf("move missing: %v", err)
		}

		if _, err := c.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: filepath.Join(base, "x")})); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(base, "x")); !os.IsNotExist(err) {
			t.Fatal("not removed")
		}
		if _, err := c.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: filepath.Join(base, "x")})); err != nil {
			t.Fatalf("remove missing must succeed: %v", err)
		}
	})
}

func TestPathResolution(t *testing.T) {
	env := newTestEnv(t)
	c := env.fs()
	os.WriteFile(filepath.Join(env.home, "h.txt"), []byte("x"), 0o644)
	for _, p := range []string{"h.txt", "~/h.txt", "./sub/../h.txt", env.home + "//h.txt"} {
		st, err := c.Stat(t.Context(), connect.NewRequest(&fspb.StatRequest{Path: p}))
		if err != nil || st.Msg.Entry.Path != filepath.Join(env.home, "h.txt") {
			t.Fatalf("%q: %v %v", p, st, err)
		}
	}
	st, err := c.Stat(t.Context(), connect.NewRequest(&fspb.StatRequest{Path: "~"}))
	if err != nil || st.Msg.Entry.Path != env.home {
		t.Fatalf("~: %v %v", st, err)
	}
	req := connect.NewRequest(&fspb.StatRequest{Path: "h.txt"})
	req.Header().Set("Authorization", basicAuth("nobody-at-all"))
	if _, err := c.Stat(t.Context(), req); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("unknown user: %v", err)
	}
}

func TestLookupUserPolicy(t *testing.T) {
	if _, err := lookupUser("no-such-user-xyz", "user"); err == nil {
		t.Fatal("unknown user accepted")
	}
	if os.Geteuid() == 0 {
		u, err := lookupUser("root", "user")
		if err != nil || u.UID != 0 || u.Home == "" {
			t.Fatalf("root: %v %v", u, err)
		}
		u, err = lookupUser("nobody", "user")
		if err != nil || u.UID != 65534 {
			t.Fatalf("nobody: %v %v", u, err)
		}
	} else {
		// Not root: "user" is an alias of ourselves; other uids are refused.
		u, err := lookupUser("user", "user")
		if err != nil || u.UID != uint32(os.Geteuid()) {
			t.Fatalf("user alias: %v %v", u, err)
		}
		if _, err := lookupUser("root", "user"); err == nil {
			t.Fatal("non-root agent accepted root")
		}
	}
}

func TestListDirDepth(t *testing.T) {
	env := newTestEnv(t)
	codecs(t, func(t *testing.T, opts ...connect.ClientOption) {
		c := env.fs(opts...)
		base := t.TempDir()
		for _, d := range []string{"a/b/c", "e"} {
			os.MkdirAll(filepath.Join(base, d), 0o755)
		}
		for _, f := range []string{"f1", "a/f2", "a/b/f3", "a/b/c/f4"} {
			os.WriteFile(filepath.Join(base, f), nil, 0o644)
		}
		rel := func(es []*fspb.EntryInfo) []string {
			var out []string
			for _, e := range es {
				r, _ := filepath.Rel(base, e.Path)
				if e.Type == fspb.FileType_FILE_TYPE_DIRECTORY {
					r += "/"
				}
				out = append(out, r)
			}
			slices.Sort(out)
			return out
		}
		for depth, want := range map[uint32][]string{
			0: {"a/", "e/", "f1"},
			1: {"a/", "e/", "f1"},
			2: {"a/", "a/b/", "a/f2", "e/", "f1"},
			9: {"a/", "a/b/", "a/b/c/", "a/b/c/f4", "a/b/f3", "a/f2", "e/", "f1"},
		} {
			l, err := c.ListDir(t.Context(), connect.NewRequest(&fspb.ListDirRequest{Path: base, Depth: depth}))
			if err != nil {
				t.Fatal(err)
			}
			if got := rel(l.Msg.Entries); !slices.Equal(got, want) {
				t.Fatalf("depth %d: %v, want %v", depth, got, want)
			}
		}
		_, err := c.ListDir(t.Context(), connect.NewRequest(&fspb.ListDirRequest{Path: filepath.Join(base, "f1")}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Fatalf("list file: %v", err)
		}
		_, err = c.ListDir(t.Context(), connect.NewRequest(&fspb.ListDirRequest{Path: filepath.Join(base, "zz")}))
		if connect.CodeOf(err) != connect.CodeNotFound {
			t.Fatalf("list missing: %v", err)
		}
	})
}

func TestFilesystemRawJSON(t *testing.T) {
	env := newTestEnv(t)
	f := filepath.Join(t.TempDir(), "a.txt")
	os.WriteFile(f, []byte("12345"), 0o644)
	mt := time.Date(2026, 8, 21, 10, 0, 0, 0, time.UTC)
	os.Chtimes(f, mt, mt)
	status, body := rawUnary(t, env.url, "/filesystem.Filesystem/Stat", `{"path":"`+f+`"}`, nil)
	if status != 200 {
		t.Fatalf("status %d %v", status, body)
	}
	e := body["entry"].(map[string]any)
	if e["name"] != "a.txt" || e["type"] != "FILE_TYPE_FILE" || e["size"] != "5" || e["mode"] != float64(420) ||
		e["permissions"] != "-rw-r--r--" || e["modifiedTime"] != "2026-08-21T10:00:00Z" || e["path"] != f {
		t.Fatalf("entry %v", e)
	}
	status, body = rawUnary(t, env.url, "/filesystem.Filesystem/Stat", `{"path":"/no/such/file"}`, nil)
	if status != 404 || body["code"] != "not_found" || !strings.Contains(body["message"].(string), "/no/such/file") {
		t.Fatalf("not found: %d %v", status, body)
	}
	status, body = rawUnary(t, env.url, "/filesystem.Filesystem/MakeDir", `{"path":"`+filepath.Dir(f)+`"}`, nil)
	if status != http.StatusConflict || body["code"] != "already_exists" {
		t.Fatalf("already exists: %d %v", status, body)
	}
	// snake_case names are accepted too, and unknown fields ignored.
	status, body = rawUnary(t, env.url, "/filesystem.Filesystem/ListDir", `{"path":"`+filepath.Dir(f)+`","depth":1,"future_field":true}`, nil)
	if status != 200 || len(body["entries"].([]any)) != 1 {
		t.Fatalf("list: %d %v", status, body)
	}
}

// watchEvent is one decoded WatchDir event.
type watchEvent struct {
	name string
	typ  fspb.EventType
	hasE bool
}

func TestWatchDir(t *testing.T) {
	env := newTestEnv(t)
	codecs(t, func(t *testing.T, opts ...connect.ClientOption) {
		dir := t.TempDir()
		os.Mkdir(filepath.Join(dir, "sub"), 0o755)
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		s, err := env.fs(opts...).WatchDir(ctx, connect.NewRequest(&fspb.WatchDirRequest{Path: dir, Recursive: true, IncludeEntry: true}))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if !s.Receive() || s.Msg().GetStart() == nil {
			t.Fatalf("first frame must be start: %v %v", s.Msg(), s.Err())
		}
		os.WriteFile(filepath.Join(dir, "new.txt"), []byte("x"), 0o644)
		os.WriteFile(filepath.Join(dir, "sub", "deep.txt"), nil, 0o644)
		os.Mkdir(filepath.Join(dir, "sub", "later"), 0o755)
		time.Sleep(50 * time.Millisecond) // let the new directory's watch land
		os.WriteFile(filepath.Join(dir, "sub", "later", "deeper.txt"), nil, 0o644)
		os.Chmod(filepath.Join(dir, "new.txt"), 0o600)
		os.Rename(filepath.Join(dir, "new.txt"), filepath.Join(dir, "renamed.txt"))
		os.Remove(filepath.Join(dir, "renamed.txt"))

		want := []watchEvent{
			{"new.txt", fspb.EventType_EVENT_TYPE_CREATE, true},
			{"new.txt", fspb.EventType_EVENT_TYPE_WRITE, true},
			{"sub/deep.txt", fspb.EventType_EVENT_TYPE_CREATE, true},
			{"sub/later", fspb.EventType_EVENT_TYPE_CREATE, true},
			{"sub/later/deeper.txt", fspb.EventType_EVENT_TYPE_CREATE, true},
			{"new.txt", fspb.EventType_EVENT_TYPE_CHMOD, false}, // entry races with the rename
			{"new.txt", fspb.EventType_EVENT_TYPE_RENAME, false},
			{"renamed.txt", fspb.EventType_EVENT_TYPE_CREATE, false}, // gone by the time we stat it
			{"renamed.txt", fspb.EventType_EVENT_TYPE_REMOVE, false},
		}
		var got []watchEvent
		for len(got) < len(want) && s.Receive() {
			if ev := s.Msg().GetFilesystem(); ev != nil {
				got = append(got, watchEvent{ev.Name, ev.Type, ev.Entry != nil})
			}
		}
		for i, w := range want {
			if i >= len(got) || got[i].name != w.name || got[i].typ != w.typ || (w.hasE && !got[i].hasE) {
				t.Fatalf("events:\n got  %v\n want %v", got, want)
			}
		}
	})
}

func TestWatchDirKeepaliveAndErrors(t *testing.T) {
	env := newTestEnv(t)
	dir := t.TempDir()
	req := connect.NewRequest(&fspb.WatchDirRequest{Path: dir})
	req.Header().Set("Keepalive-Ping-Interval", "0.2")
	ctx, cancel := context.WithTimeout(t.Context(), 700*time.Millisecond)
	defer cancel()
	s, err := env.fs(connect.WithProtoJSON()).WatchDir(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	kas := 0
	for s.Receive() {
		if s.Msg().GetKeepalive() != nil {
			kas++
		}
	}
	if kas < 2 || connect.CodeOf(s.Err()) != connect.CodeDeadlineExceeded {
		t.Fatalf("keepalives %d, err %v", kas, s.Err())
	}

	f := filepath.Join(dir, "file")
	os.WriteFile(f, nil, 0o644)
	for path, code := range map[string]connect.Code{f: connect.CodeInvalidArgument, filepath.Join(dir, "missing"): connect.CodeNotFound} {
		s, err := env.fs().WatchDir(t.Context(), connect.NewRequest(&fspb.WatchDirRequest{Path: path}))
		if err == nil {
			s.Receive()
			err = s.Err()
		}
		if connect.CodeOf(err) != code {
			t.Fatalf("watch %s: %v, want %v", path, err, code)
		}
	}
}

func TestPolledWatcher(t *testing.T) {
	env := newTestEnv(t)
	c := env.fs(connect.WithProtoJSON())
	dir := t.TempDir()
	cw, err := c.CreateWatcher(t.Context(), connect.NewRequest(&fspb.CreateWatcherRequest{Path: dir}))
	if err != nil {
		t.Fatal(err)
	}
	id := cw.Msg.WatcherId
	os.WriteFile(filepath.Join(dir, "a"), nil, 0o644)
	var names []string
	eventually(t, 5*time.Second, "polled events", func() bool {
		ev, err := c.GetWatcherEvents(t.Context(), connect.NewRequest(&fspb.GetWatcherEventsRequest{WatcherId: id}))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ev.Msg.Events {
			names = append(names, e.Name+":"+e.Type.String())
		}
		return len(names) > 0
	})
	if names[0] != "a:EVENT_TYPE_CREATE" {
		t.Fatalf("events %v", names)
	}
	// The queue is bounded: a flood without polling keeps at most maxPolledEvents.
	fh, err := os.OpenFile(filepath.Join(dir, "a"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for range maxPolledEvents + 500 {
		fh.Write([]byte{1}) // one IN_MODIFY each
	}
	fh.Close()
	time.Sleep(200 * time.Millisecond)
	ev, err := c.GetWatcherEvents(t.Context(), connect.NewRequest(&fspb.GetWatcherEventsRequest{WatcherId: id}))
	if err != nil || len(ev.Msg.Events) > maxPolledEvents || len(ev.Msg.Events) == 0 {
		t.Fatalf("flood: %d events, %v", len(ev.Msg.GetEvents()), err)
	}
	if _, err := c.RemoveWatcher(t.Context(), connect.NewRequest(&fspb.RemoveWatcherRequest{WatcherId: id})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetWatcherEvents(t.Context(), connect.NewRequest(&fspb.GetWatcherEventsRequest{WatcherId: id})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("removed watcher: %v", err)
	}
}
