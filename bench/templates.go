package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/e2bserver"
	"github.com/code-sandboxes/code-sandboxes/internal/environment"
	"github.com/code-sandboxes/code-sandboxes/local"
)

var onlyTemplates = flag.Bool("only-templates", false, "run only the template build section (serve's template API)")

// onlyTemplateBench runs templateBench alone when -only-templates is set,
// prints it and exits.
func onlyTemplateBench(ctx context.Context, rep *strings.Builder) {
	if !*onlyTemplates {
		return
	}
	templateBench(ctx, rep)
	fmt.Print(rep.String())
	os.Exit(0)
}

// templateBench measures serve's template builds (issue 15) through E2B's
// REST template API, as the SDK's Template.build drives it: a cold build
// (force: every step runs, jailed), the same steps again (the cached
// environment build), and the cold time of the same environment built from
// our own spec with the store directly, all in one run.
func templateBench(ctx context.Context, rep *strings.Builder) {
	const key = "e2b_0123456789abcdef0123456789abcdef01234567"
	rt, err := os.MkdirTemp("", "cs-bench-tpl-")
	check(err)
	defer os.RemoveAll(rt)
	srv, err := e2bserver.New(e2bserver.Options{APIKeys: []string{key}, TemplateBuilds: true,
		Config: sandboxes.Config{Options: local.Options{RuntimeDir: rt}}})
	check(err)
	base, stop, err := srv.StartLoopback(false)
	check(err)
	defer stop()
	st, err := environment.Open("")
	check(err)
	_, err = st.Ensure(ctx, "python", environment.BuildOptions{Progress: os.Stderr})
	check(err)

	const run = "mkdir -p /opt/bench && echo bench > /opt/bench/marker"
	steps := `[{"type":"RUN","args":["` + run + `"]},{"type":"ENV","args":["BENCH","1"]}]`
	build := func(force bool) float64 {
		var req struct{ TemplateID, BuildID string }
		check(call(ctx, "POST", base+"/v3/templates", key, `{"name":"bench-tpl","cpuCount":1,"memoryMB":512}`, &req))
		t := time.Now()
		body := fmt.Sprintf(`{"fromTemplate":"code-interpreter-v1","force":%v,"steps":%s}`, force, steps)
		check(call(ctx, "POST", base+"/v2/templates/"+req.TemplateID+"/builds/"+req.BuildID, key, body, nil))
		for {
			var s struct {
				Status string
				Reason *struct{ Message string }
			}
			check(call(ctx, "GET", base+"/templates/"+req.TemplateID+"/builds/"+req.BuildID+"/status", key, "", &s))
			switch s.Status {
			case "ready":
				return since(t)
			case "error":
				check(fmt.Errorf("template build failed: %+v", s.Reason))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	spec := &environment.Spec{Name: "bench-own-spec", Base: environment.Base{Environment: "python"},
		Steps: []environment.Step{{Run: run}, {Env: map[string]string{"BENCH": "1"}}}}
	ownBuild := func() float64 {
		t := time.Now()
		own, err := st.Build(ctx, spec, environment.BuildOptions{Force: true})
		check(err)
		d := since(t)
		_, _ = st.Remove(own.ID)
		return d
	}
	// Own spec before and after the template's cold build, so that neither
	// side alone gets the page cache the first copy of the base warms.
	own1 := ownBuild()
	cold := build(true)
	own2 := ownBuild()
	ownCold := (own1 + own2) / 2
	var cached []float64
	for i := 0; i < 5; i++ {
		cached = append(cached, build(false))
	}

	rep.WriteString("## Template builds through serve (issue 15)\n\n")
	rep.WriteString("E2B's template API on an in-process `serve --template-builds` (`POST /v3/templates`, trigger, poll the status every 20 ms), " +
		"`fromTemplate: code-interpreter-v1` + one RUN step + one ENV step; every step runs in the build jail.\n\n")
	rep.WriteString("| build | time | note |\n|---|---|---|\n")
	fmt.Fprintf(rep, "| template, cold (`force`) | %.1f s | copy of the `python` rootfs + the jailed RUN step |\n", cold/1000)
	fmt.Fprintf(rep, "| template, same steps again (cached) | %.0f ms p50 | %d runs: the environment build is found by content |\n", summarize(cached).p50, len(cached))
	fmt.Fprintf(rep, "| the same environment from our own spec (`Store.Build`, cold) | %.1f s | mean of one run before and one after the template's (%.1f s, %.1f s); template cold / own spec: %.2f× |\n\n",
		ownCold/1000, own1/1000, own2/1000, cold/ownCold)
}

// call is one JSON call to serve's API with the key.
func call(ctx context.Context, method, url, key, body string, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader([]byte(body)))
	if err != nil {
		return err
	}
	req.Header.Set("X-API-Key", key)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		var e struct{ Message string }
		_ = json.NewDecoder(resp.Body).Decode(&e)
		return fmt.Errorf("%s %s: %d %s", method, url, resp.StatusCode, e.Message)
	}
	if out != nil {
		return json.NewDecoder(resp.Body).Decode(out)
	}
	return nil
}
