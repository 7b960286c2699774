package e2bserver

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// An SDK's /execute through serve goes over the agent's lean connection
// and answers as the agent's /execute does: the lines, a refusal's status
// and text, an interrupt when the SDK goes away; a body over the agent's
// bound gets the agent's own answer through the plain proxy.
func TestExecuteThroughServeLean(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sandboxes")
	}
	needSandboxes(t)
	s, base := testServer(t, Options{})
	sb := createSB(t, base, testKey, `{"templateID":"code-interpreter-v1","timeout":120}`)
	post := func(ctx context.Context, body string) (*http.Response, string) {
		req, _ := http.NewRequestWithContext(ctx, "POST", base+"/execute", strings.NewReader(body))
		req.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
		req.Header.Set("E2b-Sandbox-Port", "49999")
		req.Header.Set("X-Access-Token", sb.EnvdAccessToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ""
			}
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	ctx := context.Background()
	post(ctx, `{"code":"x = 40"}`)
	resp, out := post(ctx, `{"code":"print('hi')\nx + 2"}`)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" ||
		!strings.Contains(out, `"text": "hi\n"`) || !strings.Contains(out, `"text": "42"`) || !strings.HasSuffix(out, `{"type": "end_of_execution"}`+"\n") {
		t.Fatalf("x + 2: %d %v %s", resp.StatusCode, resp.Header, out)
	}
	resp, out = post(ctx, `{"code":"1","context_id":"nope"}`)
	if resp.StatusCode != 404 || out != "Context nope not found" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("unknown context: %d %q %v", resp.StatusCode, out, resp.Header)
	}
	resp, out = post(ctx, `{"code":"`+strings.Repeat("x", 9<<20)+`"}`)
	if resp.StatusCode != 413 && resp.StatusCode != 400 {
		t.Fatalf("a 9 MiB cell: %d %.200s", resp.StatusCode, out)
	}
	// A cell over the lean path's 64 KiB, sent chunked (no length ahead):
	// serve reads 64 KiB, then hands the whole body to the plain proxy.
	big := `{"code":"s = '` + strings.Repeat("z", 100<<10) + `'\nlen(s)"}`
	req, _ := http.NewRequest("POST", base+"/execute", io.MultiReader(strings.NewReader(big)))
	req.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
	req.Header.Set("E2b-Sandbox-Port", "49999")
	req.Header.Set("X-Access-Token", sb.EnvdAccessToken)
	if resp, err := http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	} else {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), `"text": "102400"`) {
			t.Fatalf("a 100 KiB chunked cell: %d %.300s", resp.StatusCode, b)
		}
	}
	// The SDK giving up interrupts the cell; the context stays usable.
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	post(cctx, `{"code":"import time\nfor _ in range(600): time.sleep(0.1)\nflag = 1"}`)
	cancel()
	if _, out := post(ctx, `{"code":"'flag' in globals()"}`); !strings.Contains(out, `"text": "False"`) {
		t.Fatalf("after the SDK went away: %s", out)
	}
	// Those went over the lean connection: serve's metric says so.
	mfs, err := s.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	lean := uint64(0)
	for _, mf := range mfs {
		if mf.GetName() != "code_sandboxes_serve_proxy_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" && l.GetValue() == "execute" {
					lean += m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	if lean < 5 {
		t.Fatalf("%d executions over the lean connection, want at least 5", lean)
	}
}
