package agent

import (
	"encoding/json"
	"testing"
)

func TestPyJSON(t *testing.T) {
	b, err := pyJSON(map[string]any{"type": "end_of_execution"})
	if err != nil || string(b) != `{"type": "end_of_execution"}` {
		t.Fatalf("%s %v", b, err)
	}
	b, _ = pyJSON(map[string]any{"text": "é, 😀: <b>"})
	if string(b) != `{"text": "\u00e9, \ud83d\ude00: <b>"}` {
		t.Fatalf("%s", b)
	}
}

func FuzzPythonize(f *testing.F) {
	f.Add(`{"a":"b,c:d","e":[1,2,{"f":"\"x\\"}]}`)
	f.Add(`{"t":"日本語\n😀"}`)
	f.Fuzz(func(t *testing.T, s string) {
		var v any
		if json.Unmarshal([]byte(s), &v) != nil {
			return
		}
		b, err := pyJSON(v)
		if err != nil {
			return
		}
		var back any
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("pythonized JSON does not parse: %q -> %q: %v", s, b, err)
		}
		b1, _ := json.Marshal(v)
		b2, _ := json.Marshal(back)
		if string(b1) != string(b2) {
			t.Fatalf("value changed: %s vs %s", b1, b2)
		}
	})
}
