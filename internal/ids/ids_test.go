package ids

import (
	"regexp"
	"testing"
)

func TestShapes(t *testing.T) {
	idRE := regexp.MustCompile(`^l[a-z0-9]{16}$`)
	seen := map[string]bool{}
	for range 1000 {
		id := Sandbox('l')
		if !idRE.MatchString(id) {
			t.Fatalf("id %q", id)
		}
		if seen[id] {
			t.Fatalf("id %q twice in 1000", id)
		}
		seen[id] = true
	}
	if tok := Token(24); len(tok) != 48 || tok == Token(24) {
		t.Fatalf("token %q", tok)
	}
}
