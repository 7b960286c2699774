package client

import (
	"reflect"
	"testing"
)

// The lines of an x + 2 round trip as our agent writes them.
var agentLines = [][]byte{
	[]byte(`{"type": "number_of_executions", "execution_count": 4229}` + "\n"),
	[]byte(`{"type": "result", "text": "42", "extra": {}, "is_main_result": true}` + "\n"),
}

// TestDecodeLineAgentLayoutAllocs: the agent's own lines decode without
// encoding/json (48 allocations for the pair before fastLine; 4 with it: the
// result's Data and Extra maps and its raw text).
func TestDecodeLineAgentLayoutAllocs(t *testing.T) {
	for _, l := range agentLines {
		if _, ok := fastLine(l); !ok {
			t.Errorf("fastLine refused the agent's line %s", l)
		}
	}
	n := testing.AllocsPerRun(100, func() {
		for _, l := range agentLines {
			if _, err := DecodeLine(l); err != nil {
				t.Fatal(err)
			}
		}
	})
	if n > 6 {
		t.Errorf("DecodeLine of the agent's two lines: %.0f allocations, want ≤ 6", n)
	}
}

// FuzzFastLine: whatever fastLine accepts, the general decoder decodes to
// the same Line.
func FuzzFastLine(f *testing.F) {
	for _, l := range agentLines {
		f.Add(l)
	}
	for _, s := range []string{
		`{"type": "number_of_executions", "execution_count": 0}`,
		`{"type": "number_of_executions", "execution_count": 007}`,
		`{"type": "number_of_executions", "execution_count": -1}`,
		`{"type": "number_of_executions", "execution_count": 1e3}`,
		`{"type": "number_of_executions", "execution_count": 999999999}`,
		`{"type": "number_of_executions", "execution_count": 99999999999999999999}`,
		`{"type": "number_of_executions", "execution_count": 1}}`,
		`{"type": "number_of_executions", "execution_count": 1} x`,
		`{"type": "result", "text": "", "extra": {}, "is_main_result": false}`,
		`{"type": "result", "text": "a\"b", "extra": {}, "is_main_result": true}`,
		`{"type": "result", "text": "a\\b", "extra": {}, "is_main_result": true}`,
		`{"type": "result", "text": "\u00e9", "extra": {}, "is_main_result": true}`,
		"{\"type\": \"result\", \"text\": \"\xe9\", \"extra\": {}, \"is_main_result\": true}",
		"{\"type\": \"result\", \"text\": \"a\tb\", \"extra\": {}, \"is_main_result\": true}",
		`{"type": "result", "text": "<b>&</b>", "extra": {}, "is_main_result": true}`,
		`{"type": "result", "text": "1", "extra": {}, "is_main_result": true, "text": "2"}`,
		`{"type": "result", "text": "1", "extra": {}, "is_main_result": null}`,
		`{"type": "result", "text": "1", "extra": {}, "is_main_result": truex}`,
		"  {\"type\": \"result\", \"text\": \"1\", \"extra\": {}, \"is_main_result\": true} \r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fast, ok := fastLine(b)
		if !ok {
			return
		}
		slow, err := decodeLine(b)
		if err != nil {
			t.Fatalf("fastLine decoded %q, the general decoder refused it: %v", b, err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q: fastLine %+v, the general decoder %+v", b, fast, slow)
		}
	})
}

func BenchmarkDecodeLine(b *testing.B) {
	for b.Loop() {
		for _, l := range agentLines {
			if _, err := DecodeLine(l); err != nil {
				b.Fatal(err)
			}
		}
	}
}
