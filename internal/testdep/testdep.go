// Package testdep is the one place a test gives up for a missing
// dependency (python3, user namespaces, setpriv, a pty, xattrs, node...):
// it skips on a developer's machine, and fails under CI=true, where every
// dependency is installed by the project's scripts and a skip would hide a
// broken test. It imports nothing of the project, so every package's tests
// can use it.
package testdep

import (
	"os"
	"testing"
)

// CI reports whether the tests run in CI (CI=true).
func CI() bool { return os.Getenv("CI") == "true" }

// Require skips t (fails it under CI=true) unless ok; why names the missing
// dependency and how to get it.
func Require(t testing.TB, ok bool, why string) {
	t.Helper()
	if ok {
		return
	}
	if CI() {
		t.Fatalf("missing dependency (CI=true, so this fails instead of skipping): %s", why)
	}
	t.Skip(why)
}

// Want is for an optional part of a test: it returns ok, and when ok is
// false it logs why (fails under CI=true).
func Want(t testing.TB, ok bool, why string) bool {
	t.Helper()
	if !ok {
		if CI() {
			t.Fatalf("missing dependency (CI=true, so this fails instead of running less): %s", why)
		}
		t.Logf("not checked: %s", why)
	}
	return ok
}
