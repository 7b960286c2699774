package agentconfig_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/agentconfig"
	"github.com/code-sandboxes/code-sandboxes/internal/ctragent"
	"github.com/code-sandboxes/code-sandboxes/internal/earlystart"
)

// The agents read a flat object: the shared fields beside each variant's
// own, under their documented names. A Base that were a named field
// instead of embedded would nest them ({"Base":{...}}) and every agent
// would start without an id or a token.
func TestConfigsAreFlat(t *testing.T) {
	base := agentconfig.Base{ID: "sb1", Token: "tok", Python: "/usr/bin/python3", Workdir: "/home/user",
		Env: map[string]string{"A": "1"}, Lifetime: time.Minute, IdleTimeout: time.Second, NoPrewarm: true}
	for name, v := range map[string]any{
		"ctragent.Config":        ctragent.Config{Base: base, HostUID: 7},
		"earlystart.AgentConfig": earlystart.AgentConfig{Base: base, KernelBytecodeFD: 5},
	} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"id", "token", "python", "workdir", "env", "lifetime", "idle_timeout", "no_prewarm"} {
			if _, ok := m[k]; !ok {
				t.Errorf("%s: no %q at the top of %s", name, k, b)
			}
		}
		if m["id"] != "sb1" || m["token"] != "tok" || m["lifetime"] != float64(time.Minute) {
			t.Errorf("%s: %s", name, b)
		}
	}
	// And back: what a host wrote, an agent reads.
	var c ctragent.Config
	if err := json.Unmarshal([]byte(`{"id":"x","token":"y","host_uid":3}`), &c); err != nil || c.ID != "x" || c.Token != "y" || c.HostUID != 3 {
		t.Errorf("read %+v, %v", c, err)
	}
}
