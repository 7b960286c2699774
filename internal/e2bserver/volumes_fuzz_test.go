package e2bserver

import (
	"path"
	"strings"
	"testing"
)

// FuzzVolumePath: whatever path a content call names, what reaches
// os.Root is "." or a clean relative path with no ".." component (os.Root
// is the second wall; this is the first).
func FuzzVolumePath(f *testing.F) {
	for _, s := range []string{"", "/", "/a/b", "a/../b", "../x", "/..", "//a//b/", "./a", "a/./b", "/a/b/..", "\x00", "..."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		rel, ok := volumePath(p)
		if !ok {
			return
		}
		if rel == "." {
			return
		}
		if rel == "" || strings.HasPrefix(rel, "/") || path.Clean(rel) != rel || strings.ContainsRune(rel, 0) {
			t.Fatalf("%q gave %q", p, rel)
		}
		for _, c := range strings.Split(rel, "/") {
			if c == ".." || c == "." || c == "" {
				t.Fatalf("%q gave %q", p, rel)
			}
		}
	})
}
