package standalone

import (
	"net"
	"testing"
)

// Only the probe's own lines are answers: an exit status, an error of
// another binary or an empty output never say "not reached".
func TestProbeAnswer(t *testing.T) {
	for out, want := range map[string][2]bool{
		ProbeReached + "\n":                {true, true},
		ProbeRefused + "\n":                {false, true},
		"":                                 {false, false},
		"Error: unknown flag: --sandbox\n": {false, false},
		ProbeRefused + "\n" + ProbeReached + "\n": {false, false},
	} {
		if r, ok := ProbeAnswer(out); r != want[0] || ok != want[1] {
			t.Errorf("ProbeAnswer(%q) = %v, %v; want %v", out, r, ok, want)
		}
	}
}

func TestProbeConnect(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	if code := ProbeConnect([]string{host, port}); code != 0 {
		t.Errorf("ProbeConnect to a listener: %d", code)
	}
	ln.Close()
	if code := ProbeConnect([]string{host}); code != 2 {
		t.Errorf("ProbeConnect without a port: %d; want 2", code)
	}
}
