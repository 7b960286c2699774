package settings

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var nameRE = regexp.MustCompile(`CODE_SANDBOXES_[A-Z0-9_]*[A-Z0-9]`)

// repoRoot is the module's root, two levels up.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod at %s: %v", root, err)
	}
	return root
}

// Every variable the code, the tests or the scripts name is declared, and
// every declared one is named somewhere: the list can't drift.
func TestEveryVariableDeclared(t *testing.T) {
	root := repoRoot(t)
	seen := map[string][]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			if rel == ".git" || rel == "bin" || rel == "artifacts" || rel == "node_modules" || strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasPrefix(rel, filepath.Join("internal", "settings")+string(filepath.Separator)) || rel == "README.md" {
			return nil
		}
		if !strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, ".sh") && d.Name() != "Makefile" && !strings.HasPrefix(rel, ".ci") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, n := range nameRE.FindAllString(string(b), -1) {
			seen[n] = append(seen[n], rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for n, files := range seen {
		if _, ok := Lookup(n); !ok {
			t.Errorf("%s (in %s) is not declared in internal/settings: add it to All with its default and what it does", n, strings.Join(slices.Compact(files), ", "))
		}
	}
	for _, v := range All {
		if _, ok := seen[v.Name]; !ok {
			t.Errorf("%s is declared but nothing reads it: remove it from All", v.Name)
		}
	}
}

func TestAllSortedAndDocumented(t *testing.T) {
	if !slices.IsSortedFunc(All, func(a, b Var) int { return strings.Compare(a.Name, b.Name) }) {
		t.Error("All is not sorted by name (Lookup searches it)")
	}
	for i, v := range All {
		if !strings.HasPrefix(v.Name, Prefix) || v.Doc == "" || (v.Scope != User && v.Scope != Internal && v.Scope != Test) {
			t.Errorf("All[%d] = %+v", i, v)
		}
		if i > 0 && All[i-1].Name == v.Name {
			t.Errorf("%s declared twice", v.Name)
		}
	}
}

func TestUnknown(t *testing.T) {
	got := Unknown([]string{"CODE_SANDBOXES_RUNSC=/x", "CODE_SANDBOXES_RUNSCC=/x", "PATH=/bin", "CODE_SANDBOXES_TRACE", "CODE_SANDBOXES_NOPE=1", "CODE_SANDBOXES_NOPE=2"})
	if !slices.Equal(got, []string{"CODE_SANDBOXES_NOPE", "CODE_SANDBOXES_RUNSCC"}) {
		t.Errorf("Unknown = %v", got)
	}
}

// The README's table is the one Table makes (make generate writes it).
func TestReadmeTable(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	got, ok := ReadmeSection(string(b))
	if !ok {
		t.Fatalf("README.md has no %s … %s section", BeginMarker, EndMarker)
	}
	if got != Table() {
		t.Errorf("README.md's settings table is not internal/settings' (run make generate):\n%s", Table())
	}
}
