package kernel

import "testing"

func TestBasic(t *testing.T) {
	s := newTestSession(t)
	r := exec1(t, s, "x = 40\nprint('hi')\nx + 2")
	t.Logf("%+v", r)
	if m := r.main(); m == nil || str(t, m.Data["text/plain"]) != "42" {
		t.Fatalf("main result: %+v", r.events)
	}
	if r.stdout() != "hi\n" {
		t.Fatalf("stdout %q", r.stdout())
	}
}
