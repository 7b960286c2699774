package envd

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/code-sandboxes/code-sandboxes/internal/envdpb/filesystem/filesystemconnect"
	"github.com/code-sandboxes/code-sandboxes/internal/envdpb/process/processconnect"
)

// testEnv is one agent (all three handlers) behind a real HTTP server.
type testEnv struct {
	url   string
	home  string
	procs *ProcessService
	fsys  *FilesystemService
	opts  Options
}

// newTestEnv starts the handlers with a "user" that is the test's own uid
// and whose home is a temp dir (the machine's passwd has no "user").
func newTestEnv(t *testing.T, mod ...func(*Options)) *testEnv {
	t.Helper()
	home := t.TempDir()
	opts := Options{
		LookupUser: func(name string) (User, error) {
			switch name {
			case "user":
				return User{Name: "user", UID: uint32(os.Geteuid()), GID: uint32(os.Getegid()), Home: home}, nil
			case "nobody":
				return User{Name: "nobody", UID: 65534, GID: 65534, Home: home}, nil
			}
			return User{}, fmt.Errorf("%w: invalid username: %q", ErrUnknownUser, name)
		},
		Env:          func() map[string]string { return map[string]string{"GLOBAL_VAR": "global", "SHARED": "from-global"} },
		Keepalive:    time.Minute,
		StallTimeout: 2 * time.Second,
	}
	for _, m := range mod {
		m(&opts)
	}
	ps := NewProcessService(opts)
	fss := NewFilesystemService(opts)
	mux := http.NewServeMux()
	mux.Handle(ps.Handler())
	mux.Handle(fss.Handler())
	mux.Handle("/files", NewFilesHandler(opts))
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		ps.Close()
		fss.Close()
		srv.CloseClientConnections()
		srv.Close()
	})
	return &testEnv{url: srv.URL, home: home, procs: ps, fsys: fss, opts: opts}
}

// codecs runs f once with the JSON codec (what the SDKs use) and once with
// binary proto.
func codecs(t *testing.T, f func(t *testing.T, opts ...connect.ClientOption)) {
	t.Run("json", func(t *testing.T) { f(t, connect.WithProtoJSON()) })
	t.Run("proto", func(t *testing.T) { f(t) })
}

func (e *testEnv) proc(opts ...connect.ClientOption) processconnect.ProcessClient {
	return processconnect.NewProcessClient(http.DefaultClient, e.url, opts...)
}

func (e *testEnv) fs(opts ...connect.ClientOption) filesystemconnect.FilesystemClient {
	return filesystemconnect.NewFilesystemClient(http.DefaultClient, e.url, opts...)
}

// envelope frames a Connect streaming message.
func envelope(flags byte, payload []byte) []byte {
	var b bytes.Buffer
	b.WriteByte(flags)
	_ = binary.Write(&b, binary.BigEndian, uint32(len(payload)))
	b.Write(payload)
	return b.Bytes()
}

type frame struct {
	flags   byte
	payload []byte
}

// readFrames splits a Connect streaming response body into envelopes.
func readFrames(t *testing.T, r io.Reader) []frame {
	t.Helper()
	var out []frame
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if err == io.EOF {
				return out
			}
			t.Fatalf("read envelope header: %v", err)
		}
		n := binary.BigEndian.Uint32(hdr[1:])
		p := make([]byte, n)
		if _, err := io.ReadFull(r, p); err != nil {
			t.Fatalf("read envelope payload: %v", err)
		}
		out = append(out, frame{hdr[0], p})
	}
}

// rawStream posts one JSON message to a server-streaming procedure the way
// the E2B SDKs do and returns the response and its frames.
func rawStream(t *testing.T, url, procedure, body string, hdr map[string]string) (*http.Response, []frame) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+procedure, bytes.NewReader(envelope(0, []byte(body))))
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Connect-Protocol-Version", "1")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return resp, readFrames(t, resp.Body)
}

// rawUnary posts a bare JSON message to a unary procedure.
func rawUnary(t *testing.T, url, procedure, body string, hdr map[string]string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+procedure, bytes.NewReader([]byte(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connect-Protocol-Version", "1")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s: Content-Type %q, want application/json", procedure, ct)
	}
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatalf("%s: decode body: %v", procedure, err)
	}
	return resp.StatusCode, m
}

func basicAuth(user string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"))
}

func mustJSON(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("invalid JSON %q: %v", b, err)
	}
	return m
}

// jsonEq compares JSON documents (protojson randomises whitespace on
// purpose, so bytes cannot be compared).
func jsonEq(t *testing.T, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("invalid JSON %q: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad expectation %q: %v", want, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("JSON mismatch:\n got  %s\n want %s", got, want)
	}
}

func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s", d, what)
}
