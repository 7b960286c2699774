package e2bserver

import (
	"net/url"
	"strings"
	"testing"

	"github.com/code-sandboxes/code-sandboxes/internal/e2bauth"
)

// Issue #41 item 6: a signed /files URL that names no sandbox made serve
// hash it once per live sandbox of every team, for anyone, with no key. It
// is refused now, and one that names its sandbox costs one hash, however
// many sandboxes there are.
func TestSignedURLNamesItsSandbox(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sandboxes")
	}
	needSandboxes(t)
	s, base := testServer(t, Options{})
	const n = 3
	var sbs []sandboxJSON
	for range n {
		sbs = append(sbs, createSB(t, base, testKey, `{"templateID":"base","timeout":120}`))
	}
	a := sbs[0]
	execute(t, base, a, `open("/home/user/signed.txt", "w").write("secret of a")`)
	signed := url.Values{"path": {"/home/user/signed.txt"}, "signature": {e2bauth.FileSignature("/home/user/signed.txt", "read", "", a.EnvdAccessToken, 0)}}
	forged := url.Values{"path": {"/home/user/signed.txt"}, "signature": {"v1_" + strings.Repeat("A", 43)}}

	for name, q := range map[string]url.Values{"a's own signature": signed, "a forged one": forged} {
		before := s.sigChecks.Load()
		st, body := getText(t, base+"/files?"+q.Encode(), nil)
		if st != 400 || !strings.Contains(body, "E2b-Sandbox-Id") || strings.Contains(body, "secret of a") {
			t.Errorf("signed URL naming no sandbox (%s): %d %q, want 400 saying how to name it", name, st, body)
		}
		if d := s.sigChecks.Load() - before; d != 0 {
			t.Errorf("signed URL naming no sandbox (%s): %d signature checks, want none", name, d)
		}
	}
	for _, hdr := range []map[string]string{
		{"E2b-Sandbox-Id": a.SandboxID},
		{"Host": "49983-" + a.SandboxID + ".localhost"},
	} {
		before := s.sigChecks.Load()
		if st, body := getText(t, base+"/files?"+signed.Encode(), hdr); st != 200 || body != "secret of a" {
			t.Errorf("signed URL naming its sandbox (%v): %d %q", hdr, st, body)
		}
		if d := s.sigChecks.Load() - before; d != 1 {
			t.Errorf("signed URL naming its sandbox (%v): %d signature checks among %d sandboxes, want 1", hdr, d, n)
		}
	}
}
