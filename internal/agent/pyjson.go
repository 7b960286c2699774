package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// pyJSON marshals v the way Python's json.dumps does with its defaults
// (", " and ": " separators, ensure_ascii). E2B's code-interpreter server is a
// Python program, and a few clients in the wild compare lines such as
// {"type": "end_of_execution"} byte for byte, so we match its spelling.
func pyJSON(v any) ([]byte, error) {
	if o, ok := v.(ordered); ok {
		// Every line the agent writes: its own MarshalJSON output is
		// compact JSON already, which an Encoder would only scan and copy
		// once more.
		b, err := o.MarshalJSON()
		if err != nil {
			return nil, err
		}
		return pythonize(b), nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	compact := bytes.TrimRight(buf.Bytes(), "\n")
	return pythonize(compact), nil
}

// ordered is a JSON object that keeps its keys in the given order: E2B's
// server (Python dicts) writes "type" first, and so do we.
type ordered []kv

type kv struct {
	k string
	v any
}

func (o ordered) MarshalJSON() ([]byte, error) {
	var buf, vb bytes.Buffer
	enc := json.NewEncoder(&vb)
	enc.SetEscapeHTML(false)
	buf.WriteByte('{')
	for i, p := range o {
		if i > 0 {
			buf.WriteByte(',')
		}
		if plainKey(p.k) {
			buf.WriteByte('"')
			buf.WriteString(p.k)
			buf.WriteByte('"')
		} else {
			k, _ := json.Marshal(p.k)
			buf.Write(k)
		}
		buf.WriteByte(':')
		vb.Reset()
		if err := enc.Encode(p.v); err != nil {
			return nil, err
		}
		buf.Write(bytes.TrimRight(vb.Bytes(), "\n"))
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// plainKey: a key JSON spells as itself between quotes (our own keys,
// "type", "execution_count"...).
func plainKey(k string) bool {
	for i := 0; i < len(k); i++ {
		if c := k[i]; !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// pythonize rewrites compact JSON: a space after every ',' and ':' outside
// strings, and every non-ASCII rune inside strings as \uXXXX (surrogate pairs
// above the BMP), as Python's ensure_ascii does.
func pythonize(in []byte) []byte {
	out := make([]byte, 0, len(in)+len(in)/8)
	inStr := false
	for i := 0; i < len(in); {
		c := in[i]
		if inStr {
			switch {
			case c == '\\':
				end := i + 2
				if end > len(in) {
					end = len(in)
				}
				out = append(out, in[i:end]...)
				i = end
				continue
			case c == '"':
				inStr = false
			case c >= utf8.RuneSelf:
				r, size := utf8.DecodeRune(in[i:])
				if r >= 0x10000 {
					r -= 0x10000
					out = fmt.Appendf(out, `\u%04x\u%04x`, 0xD800+(r>>10), 0xDC00+(r&0x3FF))
				} else {
					out = fmt.Appendf(out, `\u%04x`, r)
				}
				i += size
				continue
			}
			out = append(out, c)
			i++
			continue
		}
		out = append(out, c)
		switch c {
		case '"':
			inStr = true
		case ',', ':':
			out = append(out, ' ')
		}
		i++
	}
	return out
}
