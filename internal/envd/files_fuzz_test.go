package envd

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzFilesUpload: POST /files as envd's SDK clients (and anyone holding
// the sandbox's token) send it: the path and username query, X-Metadata-*
// headers, and a multipart body whose "file" parts name their destination
// in Content-Disposition (or an octet-stream body). The handler runs for
// real, as the test's own user over a fresh home directory; inputs whose
// destination resolves outside that home are skipped unsent (the test runs
// as root and must not write elsewhere). Properties: never a panic; a
// refusal is envd's error body {"code","message"} with its status; an
// answer of 200 lists, for each file part in order, the path it was
// written to, and each file holds what its last part carried; metadata is
// kept only within envd's bounds (printable ASCII keys and values).
func FuzzFilesUpload(f *testing.F) {
	mp := func(parts ...[2]string) (string, []byte) {
		var b bytes.Buffer
		w := multipart.NewWriter(&b)
		for _, p := range parts {
			h := make(map[string][]string)
			h["Content-Disposition"] = []string{p[0]}
			pw, _ := w.CreatePart(h)
			_, _ = pw.Write([]byte(p[1]))
		}
		_ = w.Close()
		return w.FormDataContentType(), b.Bytes()
	}
	ct, body := mp([2]string{`form-data; name="file"; filename="a.txt"`, "hello"})
	f.Add("", "", ct, "", body)
	ct, body = mp([2]string{`form-data; name="file"; filename="~/d/b.txt"`, "x"}, [2]string{`form-data; name="other"`, "y"}, [2]string{`form-data; name="file"; filename="c"`, ""})
	f.Add("", "user", ct, "X-Metadata-Owner: me", body)
	ct, body = mp([2]string{`form-data; name="file"; filename="../../etc/x"`, "no"})
	f.Add("", "", ct, "", body)
	f.Add("dir/out.bin", "", "application/octet-stream", "X-Metadata-K: v\x01", []byte("raw"))
	f.Add("out.bin", "nobody2", "", "", []byte("raw"))
	f.Add("x", "", "multipart/form-data; boundary=zz", "", []byte("--zz\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nabc\r\n--zz--\r\n"))
	f.Add("x", "", "text/plain", "", []byte("t"))
	f.Fuzz(func(t *testing.T, qpath, username, ctype, metaHeader string, body []byte) {
		home := t.TempDir()
		self := User{Name: "user", UID: uint32(os.Geteuid()), GID: uint32(os.Getegid()), Home: home}
		opts := Options{LookupUser: func(name string) (User, error) {
			if name == "user" {
				return self, nil
			}
			return User{}, fmt.Errorf("%w: invalid username: %q", ErrUnknownUser, name)
		}}
		inside := func(dest string) bool {
			p, err := resolvePath(dest, self, "")
			if err != nil {
				return true // refused before anything is written
			}
			rel, err := filepath.Rel(home, p)
			return err == nil && rel != ".." && !strings.HasPrefix(rel, "../") && !filepath.IsAbs(rel)
		}
		// What the handler will write, read the same way first.
		type write struct{ dest, data string }
		var writes []write
		mt, params, _ := mime.ParseMediaType(ctype)
		switch mt {
		case "multipart/form-data":
			mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
			for {
				part, err := mr.NextPart()
				if err != nil {
					break
				}
				if part.FormName() != "file" {
					continue
				}
				dest := qpath
				if dest == "" {
					dest, _ = partFilename(part.Header.Get("Content-Disposition"))
				}
				data, err := io.ReadAll(part)
				if err != nil {
					break
				}
				if dest != "" && !inside(dest) {
					return
				}
				writes = append(writes, write{dest, string(data)})
			}
		case "application/octet-stream", "":
			if qpath != "" && !inside(qpath) {
				return
			}
			writes = append(writes, write{qpath, string(body)})
		}
		q := url.Values{}
		if qpath != "" {
			q.Set("path", qpath)
		}
		if username != "" {
			q.Set("username", username)
		}
		req, err := http.NewRequest(http.MethodPost, "http://envd/files?"+q.Encode(), bytes.NewReader(body))
		if err != nil {
			return
		}
		req.Header.Set("Content-Type", ctype)
		if k, v, ok := strings.Cut(metaHeader, ":"); ok {
			req.Header[http.CanonicalHeaderKey(strings.TrimSpace(k))] = []string{strings.TrimSpace(v)}
		}
		rec := httptest.NewRecorder()
		NewFilesHandler(opts).ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			var e struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Code != rec.Code || e.Message == "" {
				t.Fatalf("status %d, body %q: not envd's error body", rec.Code, rec.Body.String())
			}
			return
		}
		var out []uploadedEntry
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("200 with body %q: %v", rec.Body.String(), err)
		}
		if len(out) != len(writes) {
			t.Fatalf("%d entries for %d file parts", len(out), len(writes))
		}
		last := map[string]string{}
		for i, e := range out {
			p, err := resolvePath(writes[i].dest, self, "")
			// JSON carries text: a name's invalid UTF-8 comes back as U+FFFD.
			if err != nil || e.Path != strings.ToValidUTF8(p, "\uFFFD") {
				t.Fatalf("entry %d written to %q, want %q (%v)", i, e.Path, p, err)
			}
			last[p] = writes[i].data
			for k, v := range e.Metadata {
				if !printableASCII(k) || !printableASCII(v) || k == "" {
					t.Fatalf("metadata %q=%q kept", k, v)
				}
			}
		}
		if req.Header.Get("Content-Encoding") != "" {
			return
		}
		for p, want := range last {
			got, err := os.ReadFile(p)
			if err != nil && !errors.Is(err, os.ErrNotExist) || string(got) != want {
				t.Fatalf("%s holds %q, want %q (%v)", p, got, want, err)
			}
		}
	})
}
