package client

import (
	"bytes"
	"encoding/json"
)

// The two lines every execution of an expression carries, in the layout our
// agent writes them (internal/agent's eventLine: Python's separators, the
// type first). Decoding them with encoding/json (a map of raw values, then
// each value again) cost 12-26 µs of the client's CPU per x + 2 round trip
// on the (loaded) bench machine and 48 allocations, all of it between the
// answer arriving and RunCode returning; fastLine takes 0.7-0.9 µs and 4
// allocations (BenchmarkDecodeLine). It reads exactly these layouts;
// anything else, or a value it would have to interpret (an escape, a
// non-ASCII byte, a number that isn't a small plain integer), goes to the
// general decoder, and FuzzFastLine holds the two to the same answer.
var (
	fastCountPrefix  = []byte(`{"type": "number_of_executions", "execution_count": `)
	fastResultPrefix = []byte(`{"type": "result", "text": "`)
	fastResultMiddle = []byte(`", "extra": {}, "is_main_result": `)
)

// fastLine decodes b if it is one of those lines, else reports false.
func fastLine(b []byte) (Line, bool) {
	b = bytes.TrimRight(b, " \t\r\n")
	if len(b) == 0 || b[len(b)-1] != '}' {
		return Line{}, false
	}
	b = b[:len(b)-1]
	if rest, ok := bytes.CutPrefix(b, fastCountPrefix); ok {
		n, ok := plainInt(rest)
		if !ok {
			return Line{}, false
		}
		return Line{Type: "number_of_executions", ExecutionCount: n}, true
	}
	if rest, ok := bytes.CutPrefix(b, fastResultPrefix); ok {
		i := bytes.IndexByte(rest, '"')
		if i < 0 || !plainString(rest[:i]) {
			return Line{}, false
		}
		text := rest[:i]
		tail, ok := bytes.CutPrefix(rest[i:], fastResultMiddle)
		if !ok {
			return Line{}, false
		}
		var main bool
		switch string(tail) {
		case "true":
			main = true
		case "false":
		default:
			return Line{}, false
		}
		raw := make(json.RawMessage, 0, len(text)+2)
		raw = append(append(append(raw, '"'), text...), '"')
		return Line{Type: "result", IsMainResult: main, Data: map[string]json.RawMessage{"text": raw}, Extra: map[string]json.RawMessage{}}, true
	}
	return Line{}, false
}

// plainInt parses a JSON integer of at most 9 digits without a sign (what
// json.Unmarshal into an int gives for it); anything else reports false.
func plainInt(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 9 || (b[0] == '0' && len(b) > 1) {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// plainString: the bytes of a JSON string's inside that decode to
// themselves (printable ASCII, no quote, no backslash).
func plainString(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}
