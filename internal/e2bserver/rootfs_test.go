package e2bserver

import (
	"context"
	"encoding/base64"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	fspb "github.com/code-sandboxes/code-sandboxes/internal/envdpb/filesystem"
	"github.com/code-sandboxes/code-sandboxes/internal/envdpb/filesystem/filesystemconnect"
	"github.com/code-sandboxes/code-sandboxes/sandboxestest"
)

// envdHeaders adds serve's routing and envd's auth headers (user as Basic).
type envdHeaders struct {
	id, token, user string
}

func (h envdHeaders) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("E2b-Sandbox-Id", h.id)
	r.Header.Set("E2b-Sandbox-Port", "49983")
	r.Header.Set("X-Access-Token", h.token)
	r.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(h.user+":")))
	return http.DefaultTransport.RoundTrip(r)
}

// The polled watchers (CreateWatcher / GetWatcherEvents / RemoveWatcher,
// what E2B's Python SDK uses) for user root run in the root helper too: a
// directory root made where the user can't write is watched, its events
// polled, the watcher removed; /proc/1 stays out of root's reach.
func TestRootPolledWatcher(t *testing.T) {
	needSandboxes(t)
	sandboxestest.Require(t, os.Geteuid() == 0, "a root user in the sandbox needs a root caller")
	_, base := testServer(t, Options{})
	req, _ := http.NewRequest("POST", base+"/sandboxes", strings.NewReader(`{"templateID":"base","timeout":300}`))
	req.Header.Set("X-API-Key", testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var sb sandboxJSON
	decodeBody(t, resp, &sb)
	fsAs := func(user string) filesystemconnect.FilesystemClient {
		return filesystemconnect.NewFilesystemClient(&http.Client{Transport: envdHeaders{sb.SandboxID, sb.EnvdAccessToken, user}}, base)
	}
	root, user := fsAs("root"), fsAs("user")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// A directory of root's in root's /root, where the user can't write.
	if _, err := root.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: "/root/w"})); err != nil {
		t.Fatal(err)
	}
	st, err := root.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: "/root/w"}))
	if err != nil || st.Msg.GetEntry().GetOwner() != "root" {
		t.Fatalf("stat /root/w as root: %v %v", st, err)
	}
	if _, err := user.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: "/root/w/by-user"})); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("the user made a directory in root's: %v", err)
	}
	w, err := root.CreateWatcher(ctx, connect.NewRequest(&fspb.CreateWatcherRequest{Path: "/root/w", Recursive: true}))
	if err != nil {
		t.Fatal(err)
	}
	id := w.Msg.GetWatcherId()
	if _, err := root.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: "/root/w/sub/deeper"})); err != nil {
		t.Fatal(err)
	}
	var names []string
	for i := 0; i < 50 && !slices.Contains(names, "sub/deeper"); i++ {
		evs, err := root.GetWatcherEvents(ctx, connect.NewRequest(&fspb.GetWatcherEventsRequest{WatcherId: id}))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs.Msg.GetEvents() {
			names = append(names, e.GetName())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !slices.Contains(names, "sub") || !slices.Contains(names, "sub/deeper") {
		t.Errorf("root's polled watcher saw %q, want sub and sub/deeper", names)
	}
	if _, err := root.RemoveWatcher(ctx, connect.NewRequest(&fspb.RemoveWatcherRequest{WatcherId: id})); err != nil {
		t.Errorf("remove watcher: %v", err)
	}
	if _, err := root.GetWatcherEvents(ctx, connect.NewRequest(&fspb.GetWatcherEventsRequest{WatcherId: id})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("a removed watcher still answers: %v", err)
	}
	// Root's watch of the agent's /proc entries is refused like the user's.
	if _, err := root.CreateWatcher(ctx, connect.NewRequest(&fspb.CreateWatcherRequest{Path: "/proc/1/fd"})); err == nil {
		t.Errorf("root watched the agent's fds")
	}

	// Root may remove its own broker's socket (as `sudo rm` could): root's
	// file operations then fail with a reason, neither hang nor act as the
	// user; the user's go on.
	if _, err := root.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: "/.code-sandboxes/root.sock"})); err != nil {
		t.Fatalf("root removing its broker's socket: %v", err)
	}
	_, err = root.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: "/root/w"}))
	if err == nil || !strings.Contains(err.Error(), "filesystem helper as root") || !strings.Contains(err.Error(), "root broker") {
		t.Errorf("root's stat without a broker: %v, want the helper's failure", err)
	}
	t.Logf("root's stat without a broker: %v", err)
	if _, err := root.CreateWatcher(ctx, connect.NewRequest(&fspb.CreateWatcherRequest{Path: "/root/w"})); err == nil {
		t.Errorf("root's watch without a broker worked")
	}
	if _, err := user.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: "/root/w"})); err != nil {
		t.Errorf("the user's stat after root's broker went: %v", err)
	}
}
