//go:build linux

package envd

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	fspb "github.com/code-sandboxes/code-sandboxes/internal/envdpb/filesystem"
	"github.com/code-sandboxes/code-sandboxes/internal/testdep"
)

func filesURL(base string, q ...string) string {
	v := url.Values{}
	for i := 0; i+1 < len(q); i += 2 {
		v.Set(q[i], q[i+1])
	}
	return base + "/files?" + v.Encode()
}

// multipartBody builds a body whose "file" parts carry the given filenames
// verbatim (full paths), as the E2B SDKs send them.
func multipartBody(t *testing.T, files [][2]string) (string, *bytes.Buffer) {
	t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	mw.WriteField("other", "ignored")
	for _, f := range files {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename="%s"`, f[0]))
		h.Set("Content-Type", "application/octet-stream")
		w, err := mw.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, f[1])
	}
	mw.Close()
	return mw.FormDataContentType(), &b
}

type uploadResp []struct {
	Path     string            `json:"path"`
	Name     string            `json:"name"`
	Type     string            `json:"type"`
	Metadata map[string]string `json:"metadata"`
}

func post(t *testing.T, u, ct string, body io.Reader, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, u, body)
	req.Header.Set("Content-Type", ct)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func get(t *testing.T, u string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultTransport.RoundTrip(req) // no transparent gzip
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func checkJSONError(t *testing.T, resp *http.Response, body []byte, status int, substr string) {
	t.Helper()
	var e struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if resp.StatusCode != status || json.Unmarshal(body, &e) != nil || e.Code != status || !strings.Contains(e.Message, substr) {
		t.Fatalf("got %d %s, want %d JSON error containing %q", resp.StatusCode, body, status, substr)
	}
}

func TestUploadMultipart(t *testing.T) {
	env := newTestEnv(t)
	dir := t.TempDir()
	// Single file with ?path= (the SDK's write()).
	ct, body := multipartBody(t, [][2]string{{"ignored-name.txt", "one"}})
	resp, b := post(t, filesURL(env.url, "path", filepath.Join(dir, "new", "one.txt")), ct, body)
	var ur uploadResp
	if resp.StatusCode != 200 || json.Unmarshal(b, &ur) != nil || len(ur) != 1 ||
		ur[0].Path != filepath.Join(dir, "new", "one.txt") || ur[0].Name != "one.txt" || ur[0].Type != "file" {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "new", "one.txt")); string(got) != "one" {
		t.Fatalf("content %q", got)
	}
	// Several files, destinations from the part filenames (full paths and a
	// home-relative one); no ?path=.
	ct, body = multipartBody(t, [][2]string{
		{filepath.Join(dir, "a", "b", "x.txt"), "x"},
		{filepath.Join(dir, "y.txt"), "y"},
		{"rel/z.txt", "z"},
	})
	resp, b = post(t, filesURL(env.url), ct, body, "Authorization", basicAuth("user"))
	ur = nil
	if resp.StatusCode != 200 || json.Unmarshal(b, &ur) != nil || len(ur) != 3 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	for p, want := range map[string]string{
		filepath.Join(dir, "a", "b", "x.txt"): "x",
		filepath.Join(dir, "y.txt"):           "y",
		filepath.Join(env.home, "rel/z.txt"):  "z",
	} {
		if got, err := os.ReadFile(p); err != nil || string(got) != want {
			t.Fatalf("%s: %q %v", p, got, err)
		}
	}
	// Overwrite keeps the mode of the existing file.
	os.Chmod(filepath.Join(dir, "y.txt"), 0o600)
	ct, body = multipartBody(t, [][2]string{{filepath.Join(dir, "y.txt"), "y2"}})
	if resp, b := post(t, filesURL(env.url), ct, body); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "y.txt")); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode())
	}
	// Errors.
	ct, body = multipartBody(t, nil)
	resp, b = post(t, filesURL(env.url), ct, body)
	checkJSONError(t, resp, b, 400, "no part")
	ct, body = multipartBody(t, [][2]string{{dir, "x"}})
	resp, b = post(t, filesURL(env.url), ct, body)
	checkJSONError(t, resp, b, 400, "is a directory")
	ct, body = multipartBody(t, [][2]string{{"f", "x"}})
	resp, b = post(t, filesURL(env.url, "username", "mallory"), ct, body)
	checkJSONError(t, resp, b, 401, "mallory")
	resp, b = post(t, filesURL(env.url, "path", "/x"), "text/plain", strings.NewReader("x"))
	checkJSONError(t, resp, b, 400, "Content-Type")
}

func TestUploadOctetStreamGzipAndMetadata(t *testing.T) {
	env := newTestEnv(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "d", "raw.bin")
	resp, b := post(t, filesURL(env.url, "path", p), "application/octet-stream", strings.NewReader("raw bytes"))
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if got, _ := os.ReadFile(p); string(got) != "raw bytes" {
		t.Fatalf("content %q", got)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(bytes.Repeat([]byte("compressible "), 1000))
	zw.Close()
	resp, b = post(t, filesURL(env.url, "path", p), "application/octet-stream", &gz, "Content-Encoding", "gzip")
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if got, _ := os.ReadFile(p); string(got) != strings.Repeat("compressible ", 1000) {
		t.Fatalf("gzip content %d bytes", len(got))
	}
	resp, b = post(t, filesURL(env.url, "path", p), "application/octet-stream", strings.NewReader("not gzip"), "Content-Encoding", "gzip")
	checkJSONError(t, resp, b, 400, "gzip")
	resp, b = post(t, filesURL(env.url), "application/octet-stream", strings.NewReader("x"))
	checkJSONError(t, resp, b, 400, "path")

	// Metadata as user.e2b.* xattrs (skipped where the filesystem has none).
	mp := filepath.Join(dir, "meta.txt")
	resp, b = post(t, filesURL(env.url, "path", mp), "application/octet-stream", strings.NewReader("m"), "X-Metadata-Owner-Team", "ai")
	if resp.StatusCode == 400 && strings.Contains(string(b), "not supported") {
		testdep.Require(t, false, "user xattrs on the test's filesystem")
	}
	var ur uploadResp
	if resp.StatusCode != 200 || json.Unmarshal(b, &ur) != nil || ur[0].Metadata["owner-team"] != "ai" {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if md := readMetadata(mp); md["owner-team"] != "ai" {
		t.Fatalf("xattrs %v", md)
	}
}

func TestUploadAsOtherUserChowns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	env := newTestEnv(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "n1", "n2", "f.txt")
	resp, b := post(t, filesURL(env.url, "path", p, "username", "nobody"), "application/octet-stream", strings.NewReader("x"))
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	for _, q := range []string{p, filepath.Dir(p), filepath.Dir(filepath.Dir(p))} {
		var st unix.Stat_t
		unix.Stat(q, &st)
		if st.Uid != 65534 || st.Gid != 65534 {
			t.Fatalf("%s owned by %d:%d", q, st.Uid, st.Gid)
		}
	}
	var st unix.Stat_t
	unix.Stat(dir, &st)
	if st.Uid != 0 {
		t.Fatal("existing directory was chowned")
	}
}

// failingReader sends some bytes and then fails, aborting the request.
type failingReader struct{ n int }

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, errors.New("client gave up")
	}
	n := min(len(p), r.n)
	r.n -= n
	return n, nil
}

// A failed upload of a new file leaves nothing behind; an overwrite is in
// place (as envd's), so the file then holds what had arrived.
func TestFailedUploadRemovesNewFile(t *testing.T) {
	env := newTestEnv(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "new.txt")
	req, _ := http.NewRequest(http.MethodPost, filesURL(env.url, "path", p), &failingReader{n: 1 << 20})
	req.Header.Set("Content-Type", "application/octet-stream")
	req.ContentLength = 10 << 20
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
	eventually(t, 5*time.Second, "partial new file removed", func() bool {
		es, _ := os.ReadDir(dir)
		return len(es) == 0
	})
}

// Uploads write in place: a watcher sees CREATE/WRITE on the target's own
// name and no temporary names; an overwrite keeps mode, owner and inode.
func TestUploadInPlace(t *testing.T) {
	env := newTestEnv(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "target.txt")
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	s, err := env.fs().WatchDir(ctx, connect.NewRequest(&fspb.WatchDirRequest{Path: dir}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.Receive() || s.Msg().GetStart() == nil {
		t.Fatalf("first frame must be start: %v %v", s.Msg(), s.Err())
	}
	for _, body := range []string{"first", "second"} {
		resp, b := post(t, filesURL(env.url, "path", p), "application/octet-stream", strings.NewReader(body))
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
	}
	os.WriteFile(filepath.Join(dir, "end"), nil, 0o644) // marks the end of the uploads' events
	var names []string
	writes := 0
	for s.Receive() {
		ev := s.Msg().GetFilesystem()
		if ev == nil {
			continue
		}
		if ev.Name == "end" {
			break
		}
		names = append(names, ev.Name)
		if ev.Name == "target.txt" && ev.Type == fspb.EventType_EVENT_TYPE_WRITE {
			writes++
		}
	}
	for _, n := range names {
		if n != "target.txt" {
			t.Fatalf("watcher saw %q (events on %v): uploads must not use temporary names", n, names)
		}
	}
	if writes == 0 { // inotify may merge the two uploads' writes into one event
		t.Fatalf("want WRITE events on target.txt, events on %v", names)
	}
	if got, _ := os.ReadFile(p); string(got) != "second" {
		t.Fatalf("content %q", got)
	}
	// An overwrite keeps the inode and the mode (an O_TRUNC write).
	os.Chmod(p, 0o600)
	var before, after unix.Stat_t
	unix.Stat(p, &before)
	resp, b := post(t, filesURL(env.url, "path", p), "application/octet-stream", strings.NewReader("third"))
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	unix.Stat(p, &after)
	if after.Ino != before.Ino || after.Mode&0o777 != 0o600 {
		t.Fatalf("overwrite replaced the file: inode %d→%d, mode %o", before.Ino, after.Ino, after.Mode&0o777)
	}
}

// A FIFO (or anything not a regular file) at the target is refused at once:
// it must neither block the handler nor receive the upload.
func TestUploadRefusesNonRegular(t *testing.T) {
	env := newTestEnv(t)
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pipe")
	if err := unix.Mkfifo(fifo, 0o666); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var resp *http.Response
	var b []byte
	go func() {
		defer close(done)
		resp, b = post(t, filesURL(env.url, "path", fifo), "application/octet-stream", strings.NewReader("x"))
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("upload to a FIFO blocked")
	}
	checkJSONError(t, resp, b, 400, "not a regular file")
	resp, b = post(t, filesURL(env.url, "path", "/dev/null"), "application/octet-stream", strings.NewReader("x"))
	checkJSONError(t, resp, b, 400, "not a regular file")
}

// Metadata: replaced by each upload (an upload without it clears it),
// validated like envd's (printable US-ASCII, bounded); a refused upload
// creates nothing.
func TestUploadMetadataReplaceAndValidate(t *testing.T) {
	env := newTestEnv(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "m.txt")
	resp, b := post(t, filesURL(env.url, "path", p), "application/octet-stream", strings.NewReader("1"), "X-Metadata-A", "1", "X-Metadata-B", "2")
	testdep.Require(t, resp.StatusCode != 400 || !strings.Contains(string(b), "not supported"), fmt.Sprintf("user xattrs on %s: %s", dir, b))
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	resp, b = post(t, filesURL(env.url, "path", p), "application/octet-stream", strings.NewReader("2"), "X-Metadata-B", "3")
	if md := readMetadata(p); resp.StatusCode != 200 || len(md) != 1 || md["b"] != "3" {
		t.Fatalf("after replace: %v (%d %s)", md, resp.StatusCode, b)
	}
	resp, b = post(t, filesURL(env.url, "path", p), "application/octet-stream", strings.NewReader("3"))
	if md := readMetadata(p); resp.StatusCode != 200 || md != nil {
		t.Fatalf("after an upload without metadata: %v (%d %s)", md, resp.StatusCode, b)
	}
	q := filepath.Join(dir, "refused.txt")
	for _, h := range [][2]string{
		{"X-Metadata-Good", "bad\tvalue"},
		{"X-Metadata-Good", "caf\u00e9"},
		{"X-Metadata-" + strings.Repeat("k", 247), "v"},
		{"X-Metadata-Big", strings.Repeat("v", 5000)},
	} {
		resp, b = post(t, filesURL(env.url, "path", q), "application/octet-stream", strings.NewReader("x"), h[0], h[1])
		checkJSONError(t, resp, b, 400, "metadata")
		if _, err := os.Stat(q); err == nil {
			t.Fatalf("a refused upload (%s) created the file", h[0])
		}
	}
}

func TestDownload(t *testing.T) {
	env := newTestEnv(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "d.txt")
	os.WriteFile(p, []byte("0123456789"), 0o644)
	resp, b := get(t, filesURL(env.url, "path", p))
	if resp.StatusCode != 200 || string(b) != "0123456789" {
		t.Fatalf("%d %q", resp.StatusCode, b)
	}
	resp, b = get(t, filesURL(env.url, "path", p), "Range", "bytes=2-4")
	if resp.StatusCode != 206 || string(b) != "234" {
		t.Fatalf("range: %d %q", resp.StatusCode, b)
	}
	resp, b = get(t, filesURL(env.url, "path", p), "Accept-Encoding", "gzip")
	if resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("no gzip: %v", resp.Header)
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if plain, _ := io.ReadAll(zr); string(plain) != "0123456789" {
		t.Fatalf("gunzip %q", plain)
	}
	os.WriteFile(filepath.Join(env.home, "h.txt"), []byte("home"), 0o644)
	if _, b := get(t, filesURL(env.url, "path", "~/h.txt", "username", "user")); string(b) != "home" {
		t.Fatalf("home-relative: %q", b)
	}
	resp, b = get(t, filesURL(env.url, "path", dir))
	checkJSONError(t, resp, b, 400, "directory")
	resp, b = get(t, filesURL(env.url, "path", filepath.Join(dir, "missing")))
	checkJSONError(t, resp, b, 404, "missing")
	resp, b = get(t, filesURL(env.url, "path", p), "Authorization", basicAuth("mallory"))
	checkJSONError(t, resp, b, 401, "mallory")
	resp, b = get(t, filesURL(env.url, "path", p), "Accept-Encoding", "br, identity;q=0")
	checkJSONError(t, resp, b, 406, "Accept-Encoding")
}

// patternReader yields n deterministic pseudo-random bytes without holding
// them in memory.
type patternReader struct {
	n, off int64
	state  uint64
}

func (r *patternReader) Read(p []byte) (int, error) {
	if r.off >= r.n {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), r.n-r.off)]
	for i := range p {
		if r.off%8 == 0 {
			r.state = r.state*6364136223846793005 + 1442695040888963407
		}
		p[i] = byte(r.state >> (8 * (r.off % 8)))
		r.off++
	}
	return len(p), nil
}

// heapWatch samples HeapInuse until stopped and returns the maximum.
func heapWatch() (stop func() uint64) {
	var peak atomic.Uint64
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return func() uint64 { close(done); <-finished; return peak.Load() }
}

func TestLargeStreamedUploadDownload(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 2×256 MiB")
	}
	const size = 256 << 20
	env := newTestEnv(t)
	dir := t.TempDir()
	runtime.GC()

	for _, mode := range []string{"octet-stream", "multipart"} {
		p := filepath.Join(dir, mode+".bin")
		want := sha256.New()
		src := io.TeeReader(&patternReader{n: size}, want)
		var body io.Reader
		var ct string
		if mode == "octet-stream" {
			body, ct = src, "application/octet-stream"
		} else {
			pr, pw := io.Pipe()
			mw := multipart.NewWriter(pw)
			go func() {
				w, _ := mw.CreateFormFile("file", p)
				_, err := io.Copy(w, src)
				if err == nil {
					err = mw.Close()
				}
				pw.CloseWithError(err)
			}()
			body, ct = pr, mw.FormDataContentType()
		}
		stop := heapWatch()
		start := time.Now()
		resp, b := post(t, filesURL(env.url, "path", p), ct, body)
		upDur := time.Since(start)
		upPeak := stop()
		if resp.StatusCode != 200 {
			t.Fatalf("%s upload: %d %s", mode, resp.StatusCode, b)
		}
		if fi, err := os.Stat(p); err != nil || fi.Size() != size {
			t.Fatalf("%s: uploaded size %v %v", mode, fi, err)
		}

		runtime.GC()
		stop = heapWatch()
		start = time.Now()
		req, _ := http.NewRequest(http.MethodGet, filesURL(env.url, "path", p), nil)
		dresp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		got := sha256.New()
		n, err := io.Copy(got, dresp.Body)
		dresp.Body.Close()
		downDur := time.Since(start)
		downPeak := stop()
		if err != nil || n != size || !bytes.Equal(got.Sum(nil), want.Sum(nil)) {
			t.Fatalf("%s download: %d bytes, %v, hash match %v", mode, n, err, bytes.Equal(got.Sum(nil), want.Sum(nil)))
		}
		t.Logf("%s: upload %s (%.0f MiB/s, peak HeapInuse %.1f MiB), download %s (%.0f MiB/s, peak HeapInuse %.1f MiB)",
			mode, upDur.Round(time.Millisecond), float64(size>>20)/upDur.Seconds(), float64(upPeak)/(1<<20),
			downDur.Round(time.Millisecond), float64(size>>20)/downDur.Seconds(), float64(downPeak)/(1<<20))
		// Client and server share this heap; both must stream.
		if upPeak > 48<<20 || downPeak > 48<<20 {
			t.Fatalf("%s: heap peaked at %d / %d bytes for a %d-byte file", mode, upPeak, downPeak, size)
		}
		os.Remove(p)
	}
}

func TestUploadNoSpace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tiny tmpfs")
	}
	mnt := t.TempDir()
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=64k"); err != nil {
		t.Skipf("cannot mount tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	env := newTestEnv(t)
	resp, b := post(t, filesURL(env.url, "path", filepath.Join(mnt, "big")), "application/octet-stream", &patternReader{n: 1 << 20})
	checkJSONError(t, resp, b, http.StatusInsufficientStorage, "space")
	if es, _ := os.ReadDir(mnt); len(es) != 0 {
		t.Fatalf("left %v behind", es)
	}
}

func TestPartFilename(t *testing.T) {
	for cd, want := range map[string]string{
		`form-data; name="file"; filename="/home/user/a b.txt"`:        "/home/user/a b.txt",
		`form-data; name="file"; filename=/home/user/plain.txt`:        "/home/user/plain.txt",
		`form-data; name="file"; filename="dir/q\"uote.txt"`:           `dir/q"uote.txt`,
		`form-data; name="file"; filename*=UTF-8''%2Ftmp%2F%C3%A9.txt`: "/tmp/é.txt",
		`form-data; name="a;b"; filename="/x/y"`:                       "/x/y",
		`form-data; name="file"; FILENAME="/upper/case"`:               "/upper/case",
		`form-data; name="file"; filename="unterminated`:               "unterminated",
	} {
		if got, ok := partFilename(cd); !ok || got != want {
			t.Errorf("%s: got %q %v, want %q", cd, got, ok, want)
		}
	}
	if _, ok := partFilename(`form-data; name="file"`); ok {
		t.Error("filename found where there is none")
	}
}

// FuzzPartFilename: never panics, and any filename Go's multipart writer
// quotes comes back unchanged (directories included).
func FuzzPartFilename(f *testing.F) {
	for _, s := range []string{"/home/user/a.txt", "a\"b", `back\slash`, "spa ce/é", ";", "="} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		partFilename(name) // arbitrary header: must not panic
		if strings.ContainsAny(name, "\r\n\x00") || !isPrintable(name) {
			return
		}
		esc := strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(name)
		cd := `form-data; name="file"; filename="` + esc + `"`
		got, ok := partFilename(cd)
		if !ok || got != name {
			t.Fatalf("%q: got %q %v", cd, got, ok)
		}
	})
}

func isPrintable(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == 0xfffd {
			return false
		}
	}
	return true
}

// TestDownloadNonRegularRefused: a FIFO (or any non-regular file) at the
// path is refused at once: opening a FIFO for reading blocks until a
// writer comes, which hung the download (and MCP read_file) for good.
func TestDownloadNonRegularRefused(t *testing.T) {
	env := newTestEnv(t)
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	// Releases a handler stuck opening the FIFO, so that a failure is
	// reported rather than hanging the server's Close.
	t.Cleanup(func() {
		if fd, err := unix.Open(fifo, unix.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
			unix.Close(fd)
		}
	})
	sock := filepath.Join(dir, "sock")
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: sock}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, sock, "/dev/null"} {
		c := &http.Client{Timeout: 10 * time.Second}
		resp, err := c.Get(filesURL(env.url, "path", p))
		if err != nil {
			t.Fatalf("%s: %v (the download hangs)", p, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		checkJSONError(t, resp, b, 400, "not a regular file")
	}
}
