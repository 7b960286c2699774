package agent

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/code-sandboxes/code-sandboxes/internal/kernel"
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

// refOrderedJSON is the encoding every line had before pyJSON's fast path
// for ordered (an Encoder over MarshalJSON's output, which compacts and
// checks it; keys through json.Marshal): the fast path must not change a
// byte of any line.
func refOrderedJSON(t *testing.T, o ordered) []byte {
	t.Helper()
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, p := range o {
		if i > 0 {
			buf.WriteByte(',')
		}
		k, _ := json.Marshal(p.k)
		buf.Write(k)
		buf.WriteByte(':')
		var vb bytes.Buffer
		enc := json.NewEncoder(&vb)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(p.v); err != nil {
			t.Fatal(err)
		}
		buf.Write(bytes.TrimRight(vb.Bytes(), "\n"))
	}
	buf.WriteByte('}')
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(json.RawMessage(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	return pythonize(bytes.TrimRight(out.Bytes(), "\n"))
}

func TestPyJSONOrderedUnchanged(t *testing.T) {
	odd := "q\"b\\s/<>&\u2028\u2029\x00\x1f\x7f é 😀 \xff\xfe end"
	cases := []ordered{
		{{"type", "end_of_execution"}},
		{{"type", "stdout"}, {"text", odd}, {"timestamp", "2026-12-01T22:00:00.000000Z"}},
		{{"type", "number_of_executions"}, {"execution_count", 42}},
		{{"type", "execution_status"}, {"interrupted", true}, {"timed_out", false}, {"kernel_died", false}},
		resultLine(map[string]json.RawMessage{"text/plain": json.RawMessage(`"'42'"`), "application/json": json.RawMessage(`{ "a" : [1, 2.50, "x"] }`), "x/odd": json.RawMessage(`"` + "é\\u2028" + `"`)}, true),
		{{odd, odd}, {"é", nil}, {"a b", []any{1, "two", map[string]any{"k": odd}}}, {"nested", ordered{{"type", "x"}, {"v", 1.5}}}},
		{},
	}
	for i, o := range cases {
		got, err := pyJSON(o)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if want := refOrderedJSON(t, o); !bytes.Equal(got, want) {
			t.Fatalf("case %d:\n got %s\nwant %s", i, got, want)
		}
	}
}

func FuzzPyJSONOrdered(f *testing.F) {
	f.Add("type", "stdout", "text", "hello\n")
	f.Add("é", "\xff\u2028", "a\"b", "😀")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		o := ordered{{k1, v1}, {k2, []any{v2, 1, nil}}, {"type", v1 + v2}}
		got, err := pyJSON(o)
		if err != nil {
			t.Fatal(err)
		}
		if want := refOrderedJSON(t, o); !bytes.Equal(got, want) {
			t.Fatalf("got %s\nwant %s", got, want)
		}
	})
}

// TestExpressionLinesLayout pins the layout of the lines an expression's
// execution sends (x + 2's: its number, its result): the Go client decodes
// exactly this layout without encoding/json (internal/client's fastLine,
// whose test holds the same bytes). A change here wants one there, or the
// client quietly falls back to the slow decoder.
func TestExpressionLinesLayout(t *testing.T) {
	for _, c := range []struct {
		ev   kernel.Event
		want string
	}{
		{kernel.Event{Type: "number_of_executions", ExecutionCount: 4229}, `{"type": "number_of_executions", "execution_count": 4229}`},
		{kernel.Event{Type: "result", IsMainResult: true, Data: map[string]json.RawMessage{"text/plain": json.RawMessage(`"42"`)}}, `{"type": "result", "text": "42", "extra": {}, "is_main_result": true}`},
	} {
		got, err := pyJSON(eventLine(c.ev))
		if err != nil || string(got) != c.want {
			t.Errorf("%s: got %s (%v), want %s", c.ev.Type, got, err, c.want)
		}
	}
}
