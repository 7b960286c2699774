package sandboxes_test

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/sandboxestest"
)

// buildWheel makes a minimal pure-Python wheel in memory.
func buildWheel(t *testing.T, dist, version, module, source string) []byte {
	t.Helper()
	var buf bytes.Buffer
	z := zip.NewWriter(&buf)
	info := fmt.Sprintf("%s-%s.dist-info", dist, version)
	files := map[string]string{
		module + "/__init__.py": source,
		info + "/METADATA":      fmt.Sprintf("Metadata-Version: 2.1\nName: %s\nVersion: %s\n", dist, version),
		info + "/WHEEL":         "Wheel-Version: 1.0\nGenerator: code-sandboxes-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
	}
	var record strings.Builder
	for name, content := range files {
		w, err := z.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = w.Write([]byte(content))
		sum := sha256.Sum256([]byte(content))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", name, base64.RawURLEncoding.EncodeToString(sum[:]), len(content))
	}
	fmt.Fprintf(&record, "%s/RECORD,,\n", info)
	w, _ := z.Create(info + "/RECORD")
	_, _ = w.Write([]byte(record.String()))
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// serveIndex serves a PEP 503 simple index with one wheel on loopback.
func serveIndex(t *testing.T, project, file string, wheel []byte) string {
	t.Helper()
	sum := sha256.Sum256(wheel)
	mux := http.NewServeMux()
	mux.HandleFunc("/simple/"+project+"/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<html><body><a href="/files/%s#sha256=%s">%s</a></body></html>`, file, hex.EncodeToString(sum[:]), file)
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

func TestLocalPackages(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	sandboxestest.Require(t, exec.Command("/usr/bin/python3", "-m", "pip", "--version").Run() == nil, "Debian's python3-pip (make deps)")
	wheel := buildWheel(t, "cs_demo", "1.0", "cs_demo", "VALUE = 42\n")
	index := serveIndex(t, "cs-demo", "cs_demo-1.0-py3-none-any.whl", wheel)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	cfg := localConfig(t)
	cfg.Packages, cfg.PackageIndex = []string{"cs-demo==1.0"}, index
	if _, err := sandboxes.Create(ctx, cfg); !errors.Is(err, sandboxes.ErrInvalidConfig) || !strings.Contains(err.Error(), "network") {
		t.Fatalf("packages with network none = %v, want a refusal that names the network", err)
	}
	cfg.NetworkPolicy = sandboxes.NetworkAll
	sb, err := sandboxes.Create(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	ex, err := sb.RunCode(ctx, "import cs_demo\ncs_demo.VALUE")
	if err != nil || ex.Text() != "42" {
		t.Fatalf("installed package: %q %v %v", ex.Text(), ex.Error, err)
	}

	cfg.Packages = []string{"cs-missing-package"}
	_, err = sandboxes.Create(ctx, cfg)
	if !errors.Is(err, sandboxes.ErrInvalidConfig) || !strings.Contains(err.Error(), "cs-missing-package") {
		t.Fatalf("missing package = %v", err)
	}
	cfg.Packages = []string{"--index-url=http://evil"}
	if _, err := sandboxes.Create(ctx, cfg); !errors.Is(err, sandboxes.ErrInvalidConfig) {
		t.Errorf("option injection = %v", err)
	}
}
