package e2bserver

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// BenchmarkProxyExecute: x + 2 through serve's data plane (for profiles;
// the comparison with the direct path is in bench/, `-serve-only`).
func BenchmarkProxyExecute(b *testing.B) {
	needSandboxesB(b)
	rt := b.TempDir()
	s, err := New(Options{APIKeys: []string{testKey}})
	if err != nil {
		b.Fatal(err)
	}
	s.cfg.Local.RuntimeDir = rt
	base, stop, err := s.StartLoopback(false)
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	req, _ := http.NewRequest("POST", base+"/sandboxes", strings.NewReader(`{"templateID":"base","timeout":600}`))
	req.Header.Set("X-API-Key", testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	var sb sandboxJSON
	decodeBody(b, resp, &sb)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2}}
	do := func(code string) {
		r, _ := http.NewRequest("POST", base+"/execute", strings.NewReader(`{"code":"`+code+`"}`))
		r.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
		r.Header.Set("E2b-Sandbox-Port", "49999")
		r.Header.Set("X-Access-Token", sb.EnvdAccessToken)
		resp, err := hc.Do(r)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	do("x = 40")
	b.ResetTimer()
	for b.Loop() {
		do("x + 2")
	}
}
