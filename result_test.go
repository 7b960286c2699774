package sandboxes

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestResultPlainTextAllocs: a result whose text is a plain string (x + 2's
// 42) is decoded without encoding/json (6 allocations before
// plainJSONString, 4 with it: the Data map's and the string's).
func TestResultPlainTextAllocs(t *testing.T) {
	f := map[string]json.RawMessage{"text": json.RawMessage(`"42"`)}
	var r Result
	n := testing.AllocsPerRun(100, func() { r = resultFromFields(f, map[string]json.RawMessage{}, true) })
	if r.Data[MIMEText] != "42" {
		t.Fatalf("text %#v", r.Data[MIMEText])
	}
	if n > 4 {
		t.Errorf("resultFromFields of a plain text: %.0f allocations, want ≤ 4", n)
	}
}

// FuzzPlainJSONString: what plainJSONString decodes, encoding/json decodes
// to the same string.
func FuzzPlainJSONString(f *testing.F) {
	for _, s := range []string{`"42"`, `""`, `"a\"b"`, `"a\\b"`, `"\u00e9"`, "\"\xe9\"", "\"a\tb\"", `"<b>&</b>"`, `42`, `"`, ` "x"`, `"x" `} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, ok := plainJSONString(b)
		if !ok {
			return
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("plainJSONString decoded %q, encoding/json refused it: %v", b, err)
		}
		if !reflect.DeepEqual(v, any(s)) {
			t.Fatalf("%q: plainJSONString %q, encoding/json %#v", b, s, v)
		}
	})
}

// An execution without output or results is [] in JSON, never null, as
// E2B's to_json writes it (the CLI's exec --json prints this).
func TestExecutionJSONEmptyLists(t *testing.T) {
	b, err := json.Marshal(&Execution{ExecutionCount: 2})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	logs, _ := got["logs"].(map[string]any)
	for name, v := range map[string]any{"results": got["results"], "logs.stdout": logs["stdout"], "logs.stderr": logs["stderr"]} {
		if l, ok := v.([]any); !ok || len(l) != 0 {
			t.Errorf("%s = %v, want []: %s", name, v, b)
		}
	}
	if got["execution_count"] != 2.0 {
		t.Errorf("the other fields are lost: %s", b)
	}
}
