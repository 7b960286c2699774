package environment

import (
	"encoding/json"
	"errors"
	"path"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// FuzzParseSpec: an environment spec (the YAML of `code-sandboxes env
// build`, and what serve maps an E2B template build onto: base, apt, pip,
// files, env and the RUN/COPY/ENV/WORKDIR/USER steps). Properties: a
// refused spec is ErrInvalidSpec, never a panic; an accepted one is within
// every bound the build relies on (a DNS-label name, exactly one base, at
// most 256 steps, run commands of at most 64 KiB without NUL, absolute
// workdirs, files at clean absolute paths outside the directories mounted
// fresh in a sandbox, copy sources inside their archive); and it
// round-trips: written back as YAML, and as the JSON serve keeps, it parses
// to the same spec, still valid.
func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{
		"name: web\nbase: {debian: bookworm}\napt: [curl, python3=3.11.2-1]\nenv: {A: \"1\"}\n",
		"name: img\nbase: {image: python:3.12-slim}\nfiles:\n  - {path: /etc/motd, content: hi, mode: \"0644\"}\n",
		"name: tpl\nbase: {environment: python}\nsteps:\n  - run: pip install x\n    user: root\n  - env: {K: v}\n  - workdir: /app\n  - user: user\n  - copy: {archive: a.tar, src: src, dest: /app/, owner: user, mode: \"0755\"}\n",
		"name: host\nbase: {host: true}\nenv: {X: y}\n",
		"name: bad\nbase: {image: x, debian: y}\n",
		"name: bad\nbase: {environment: python}\nsteps:\n  - copy: {archive: a.tar, src: ../../etc, dest: /}\n",
		"name: bad\nbase: {environment: python}\nfiles:\n  - {path: /proc/x, content: y}\n",
		"name: bad\nbase: {environment: python}\nsteps:\n  - {}\n",
		"name: x\nbase: {environment: python}\nsteps:\n  - env: {}\n",
		"name: x\nbase: {environment: python}\nunknown: 1\n",
		"name: &a x\nbase: *a\n", "[", "",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		s, err := ParseSpec(raw, "/specdir")
		if err != nil {
			if !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("refusal is not ErrInvalidSpec: %v", err)
			}
			return
		}
		checkSpecBounds(t, s)
		// YAML round trip.
		y, err := yaml.Marshal(s)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		back, err := ParseSpec(y, "/specdir")
		if err != nil {
			t.Fatalf("accepted spec refused after its YAML round trip: %v\n%s", err, y)
		}
		if !sameSpec(s, back) {
			t.Fatalf("YAML round trip changed the spec:\n%#v\n%#v\n%s", s, back, y)
		}
		// JSON round trip (serve's template records keep steps as JSON).
		j, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		var js Spec
		if err := json.Unmarshal(j, &js); err != nil {
			t.Fatalf("JSON round trip: %v", err)
		}
		js.dir = s.dir
		if err := Validate(&js); err != nil || !sameSpec(s, &js) {
			t.Fatalf("JSON round trip changed the spec (%v):\n%#v\n%#v", err, s, &js)
		}
	})
}

func checkSpecBounds(t *testing.T, s *Spec) {
	t.Helper()
	if !ValidName(s.Name) {
		t.Fatalf("name %q", s.Name)
	}
	n := 0
	for _, set := range []bool{s.Base.Debian != "", s.Base.Image != "", s.Base.Tarball != "", s.Base.Environment != "", s.Base.Host} {
		if set {
			n++
		}
	}
	if n != 1 || len(s.Steps) > maxSteps || len(s.Apt) > maxAptPackage || len(s.Files) > maxFiles {
		t.Fatalf("bounds: %d bases, %d steps, %d apt, %d files", n, len(s.Steps), len(s.Apt), len(s.Files))
	}
	for _, f := range s.Files {
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == "/proc" || strings.HasPrefix(f.Path, "/proc/") ||
			strings.HasPrefix(f.Path+"/", "/dev/") || strings.HasPrefix(f.Path+"/", "/sys/") || strings.HasPrefix(f.Path+"/", "/tmp/") {
			t.Fatalf("file path %q", f.Path)
		}
	}
	for i, st := range s.Steps {
		if len(st.Run) > maxRunBytes || strings.ContainsRune(st.Run, 0) {
			t.Fatalf("step %d: run of %d bytes", i, len(st.Run))
		}
		if st.Workdir != "" && !path.IsAbs(st.Workdir) {
			t.Fatalf("step %d: workdir %q", i, st.Workdir)
		}
		if c := st.Copy; c != nil && (path.IsAbs(c.Src) || c.Src == ".." || strings.HasPrefix(path.Clean(c.Src), "../")) {
			t.Fatalf("step %d: copy src %q leaves its archive", i, c.Src)
		}
	}
}

// sameSpec compares specs with an empty map the same as none (YAML and
// JSON drop both under omitempty).
func sameSpec(a, b *Spec) bool {
	norm := func(s *Spec) Spec {
		c := *s
		if len(c.Env) == 0 {
			c.Env = nil
		}
		c.Steps = append([]Step(nil), s.Steps...)
		for i := range c.Steps {
			if len(c.Steps[i].Env) == 0 {
				c.Steps[i].Env = nil
			}
		}
		if len(c.Steps) == 0 {
			c.Steps = nil
		}
		if len(c.Apt) == 0 {
			c.Apt = nil
		}
		if len(c.Files) == 0 {
			c.Files = nil
		}
		return c
	}
	return reflect.DeepEqual(norm(a), norm(b))
}
