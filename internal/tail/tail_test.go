package tail

import "testing"

func TestLines(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"a\nb\nc\n", 2, "b\nc"},
		{"a\nb\n\n  \n", 5, "a\nb"},
		{"only", 3, "only"},
		{"", 3, ""},
	} {
		if got := Lines(c.in, c.n); got != c.want {
			t.Errorf("Lines(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}
