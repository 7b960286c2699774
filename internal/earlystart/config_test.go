package earlystart

import "testing"

// TestCompatible: a binary is judged by its shapes, and by its build when
// the caller knows its own clean build: an init left from another build
// (with the same shapes, but maybe older hardening) is refused then.
func TestCompatible(t *testing.T) {
	for _, c := range []struct {
		got, want string
		ok        bool
	}{
		{"abc", "abc", true},
		{"abc\n", "abc", true},
		{"abd", "abc", false},
		{"abc 1111", "abc", true},       // the caller is not stamped (go test)
		{"abc", "abc 1111", false},      // the binary is not stamped, the caller is
		{"abc 1111", "abc 1111", true},  // the same build
		{"abc 2222", "abc 1111", false}, // another build
		{"abc 1111+dirty", "abc 1111", false},
		{"abc 2222", "abc 1111+dirty", true}, // the caller can't tell its own state
		{"abd 1111", "abc 1111", false},
		{"", "abc", false},
	} {
		if got := Compatible(c.got, c.want); got != c.ok {
			t.Errorf("Compatible(%q, %q) = %v, want %v", c.got, c.want, got, c.ok)
		}
	}
	if Stamp("abc") != "abc" && Stamp("abc") != "abc "+BuildID() {
		t.Errorf("Stamp(abc) = %q", Stamp("abc"))
	}
}
