package e2bserver

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// BenchmarkProxyExecute: x + 2 through serve's data plane, and with
// -bench Direct the same request straight to the agent's socket (for
// profiles; bench/ -serve-only interleaves the two).
func BenchmarkProxyExecute(b *testing.B) { benchExecute(b, false) }

func BenchmarkDirectExecute(b *testing.B) { benchExecute(b, true) }

func benchExecute(b *testing.B, direct bool) {
	needSandboxesB(b)
	rt := b.TempDir()
	s, err := New(Options{APIKeys: []string{testKey}})
	if err != nil {
		b.Fatal(err)
	}
	setRuntimeDir(&s.cfg, rt)
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
	target := base
	if direct {
		e := s.lookup(sb.SandboxID, "")
		hc, target = e.inst.Client().HTTPClient(), e.inst.Client().EnvdURL()
	}
	do := func(code string) {
		r, _ := http.NewRequest("POST", target+"/execute", strings.NewReader(`{"code":"`+code+`"}`))
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
