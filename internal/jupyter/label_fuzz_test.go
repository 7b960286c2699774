package jupyter

import (
	"strings"
	"testing"
	"time"
)

// FuzzParseLabel: a session's name is another client's text (anyone with
// the server's token names sessions). Whatever it holds, parseLabel
// doesn't panic, and what it accepts has ids this variant could have made.
func FuzzParseLabel(f *testing.F) {
	f.Add(label{Sandbox: "jp-0123456789abcdef0123", Name: "n", Context: "default", Language: "python", Cwd: "/", Created: time.Unix(1, 0)}.String())
	f.Add(sessionPrefix + `{"sandbox":"../x","context":"default"}`)
	f.Add(sessionPrefix + `{"sandbox":"a","context":"b","tags":{"k":"v"}}`)
	f.Add(sessionPrefix + "{")
	f.Add("Untitled.ipynb")
	f.Fuzz(func(t *testing.T, name string) {
		l, ok := parseLabel(name)
		if !ok {
			return
		}
		if !validID(l.Sandbox) || !validID(l.Context) || len(name) > maxLabelBytes {
			t.Fatalf("accepted %q as %+v", name, l)
		}
		if strings.ContainsAny(l.Sandbox+l.Context, "/.\x00") {
			t.Fatalf("accepted an id with a path character: %+v", l)
		}
	})
}
