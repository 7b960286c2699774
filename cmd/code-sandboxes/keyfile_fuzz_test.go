//go:build !localonly

package main

import (
	"math"
	"strings"
	"testing"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/e2bserver"
	"github.com/code-sandboxes/code-sandboxes/local"
)

// FuzzKeyFile: serve's --api-key-file, one key a line with an optional
// team and quota=value fields. Properties: a refused file says which line
// (or that it holds no key), never a panic; every key accepted is an E2B
// key (e2b_ and lower-case hex) with a valid team or none, a quota only
// with a team, every quota number finite; and serve takes what the file
// gave (e2bserver.New accepts it or refuses it with an error at start:
// never a key or quota silently dropped or widened).
func FuzzKeyFile(f *testing.F) {
	for _, s := range []string{
		"e2b_0123456789abcdef0123456789abcdef01234567 acme sandboxes=5 memory=512M cpu=1 total-memory=4G total-cpu=4 creates-per-minute=60\n# comment\n\ne2b_abc\n",
		"e2b_0123456789abcdef0123456789abcdef01234567 acme cpu=NaN total-cpu=NaN\n",
		"e2b_0123456789abcdef0123456789abcdef01234567 acme total-cpu=Inf\n",
		"e2b_0123456789abcdef0123456789abcdef01234567 sandboxes=3\n",
		"e2b_0123456789abcdef0123456789abcdef01234567 a/b\n",
		"E2B_ABC\n", "e2b_ team\n", "e2b_00 t memory=-1\n", "e2b_00 t bogus=1\n", "", "#only\n",
		"e2b_00 t\ne2b_00 u\n",
	} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	srv, err := e2bserver.New(e2bserver.Options{APIKeys: []string{"e2b_0123456789abcdef"},
		Config: sandboxes.Config{Options: local.Options{RuntimeDir: dir}, EnvironmentDir: dir}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		keys, err := parseKeyFile("keys", b)
		if err != nil {
			if msg := err.Error(); !strings.Contains(msg, " line ") && !strings.Contains(msg, "holds no key") {
				t.Fatalf("refusal names no line: %v", err)
			}
			return
		}
		if len(keys) == 0 {
			t.Fatal("accepted a file without keys")
		}
		for _, k := range keys {
			if !e2bserver.ValidAPIKey(k.Key) || k.Team != "" && !e2bserver.ValidTeam(k.Team) {
				t.Fatalf("accepted key %q team %q", k.Key, k.Team)
			}
			if q := k.Quota; q != nil {
				if k.Team == "" {
					t.Fatalf("quota without a team for %q", k.Key)
				}
				for _, v := range []float64{q.CPU, q.TotalCPU} {
					if math.IsNaN(v) || math.IsInf(v, 0) {
						t.Fatalf("accepted a CPU quota of %v", v)
					}
				}
			}
		}
		// serve hands them to SetKeys (at start and on SIGHUP): taken as
		// they are, or refused with its reason.
		if err := srv.SetKeys(keys); err != nil && strings.TrimSpace(err.Error()) == "" {
			t.Fatal("keys refused without a reason")
		}
	})
}
