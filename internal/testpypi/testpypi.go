// Package testpypi builds pure-Python wheels in memory and serves them from
// a PEP 503 simple index on loopback, for tests that exercise pip without
// reaching PyPI (which these machines can't).
package testpypi

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

// Wheel makes a minimal pure-Python wheel of dist at version whose package
// module has source as its __init__.py; requires are its Requires-Dist
// lines (PEP 508).
func Wheel(t testing.TB, dist, version, module, source string, requires ...string) []byte {
	t.Helper()
	var buf bytes.Buffer
	z := zip.NewWriter(&buf)
	info := fmt.Sprintf("%s-%s.dist-info", strings.ReplaceAll(dist, "-", "_"), version)
	meta := fmt.Sprintf("Metadata-Version: 2.1\nName: %s\nVersion: %s\n", dist, version)
	for _, r := range requires {
		meta += "Requires-Dist: " + r + "\n"
	}
	files := []struct{ name, content string }{
		{module + "/__init__.py", source},
		{info + "/METADATA", meta},
		{info + "/WHEEL", "Wheel-Version: 1.0\nGenerator: code-sandboxes-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var record strings.Builder
	for _, f := range files {
		w, err := z.Create(f.name)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = w.Write([]byte(f.content))
		sum := sha256.Sum256([]byte(f.content))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.name, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.content))
	}
	fmt.Fprintf(&record, "%s/RECORD,,\n", info)
	w, _ := z.Create(info + "/RECORD")
	_, _ = w.Write([]byte(record.String()))
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// FileName is the wheel's file name for dist at version.
func FileName(dist, version string) string {
	return strings.ReplaceAll(dist, "-", "_") + "-" + version + "-py3-none-any.whl"
}

// SHA256 is the hex digest pip's --hash=sha256: expects.
func SHA256(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// Serve serves a simple index on 127.0.0.1 listing one file of project and
// returns the index URL (…/simple/). The listing carries the served bytes'
// true digest, as real indexes do.
func Serve(t testing.TB, project, file string, wheel []byte) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/simple/"+project+"/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<html><body><a href="/files/%s#sha256=%s">%s</a></body></html>`, file, SHA256(wheel), file)
	})
	mux.HandleFunc("/files/"+file, func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(wheel) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String() + "/simple/"
}

// Port is the loopback port of an index URL from Serve: what a build's
// jail must be told it may reach (environment.Store.LoopbackPorts).
func Port(t testing.TB, index string) int {
	t.Helper()
	u, err := url.Parse(index)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	return p
}
