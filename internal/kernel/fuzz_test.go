package kernel

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// FuzzReadFrame: the decoder must never panic or over-allocate on hostile
// input, and must accept exactly the frames encodeEvent-style writers make.
func FuzzReadFrame(f *testing.F) {
	f.Add([]byte("\xfeK\x00\x00\x00\x0e{\"t\":\"sync\"}\n"))
	f.Add([]byte("\xfeK\x00\x00\x00\x27{\"e\":1,\"m\":3,\"t\":\"done\",\"id\":2,\"exit\":3}"))
	f.Add([]byte("\xfeK\xff\xff\xff\xffxxxx"))
	f.Add([]byte("garbage"))
	f.Add([]byte("\xfeK\x00\x00\x00\x10{\"t\":\"display\"}"))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		for {
			p, err := readFrame(r, 1<<16)
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, errProtocol) {
					t.Fatalf("unexpected error type: %v", err)
				}
				return
			}
			if len(p) > 1<<16 {
				t.Fatalf("payload %d over limit", len(p))
			}
			fr, err := decodeFrame(p)
			if err != nil {
				if !errors.Is(err, errProtocol) {
					t.Fatalf("unexpected error type: %v", err)
				}
				continue
			}
			if fr.T == "display" && fr.Data == nil {
				t.Fatal("display frame without data accepted")
			}
		}
	})
}

// FuzzMarkerScanner: however the stream is split into reads, the scanner
// yields the same text and markers as when fed in one piece, and never
// loses or invents text bytes.
func FuzzMarkerScanner(f *testing.F) {
	tok := []byte("0123456789abcdef")
	f.Add([]byte("hello\x1e0123456789abcdef:12\x1fworld"), uint8(3))
	f.Add([]byte("\x1e0123456789abcdef:\x1e0123456789abcdef:5\x1f"), uint8(1))
	f.Add([]byte("\x1e0123\x1e0123456789abcdef:999999999999999999999\x1f"), uint8(7))
	f.Fuzz(func(t *testing.T, in []byte, step uint8) {
		scan := func(step int) (string, []uint64) {
			sc := newMarkerScanner(tok)
			var text bytes.Buffer
			var marks []uint64
			tf := func(p []byte) { text.Write(p) }
			mf := func(n uint64) { marks = append(marks, n) }
			for i := 0; i < len(in); i += step {
				sc.feed(in[i:min(i+step, len(in))], tf, mf)
			}
			sc.flush(tf)
			return text.String(), marks
		}
		wholeText, wholeMarks := scan(len(in) + 1)
		st := int(step)%17 + 1
		text, marks := scan(st)
		if text != wholeText || len(marks) != len(wholeMarks) {
			t.Fatalf("split %d: %q %v vs whole %q %v", st, text, marks, wholeText, wholeMarks)
		}
		if len(wholeMarks) == 0 && wholeText != string(in) {
			t.Fatalf("text changed without markers: %q → %q", in, wholeText)
		}
	})
}
