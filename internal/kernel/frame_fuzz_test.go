package kernel

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"testing"
)

// FuzzFrameRoundTrip: frames both ways of the agent↔kernel pipes.
// Properties: any payloads written as frames (magic, length, payload) read
// back one by one, byte for byte, then a clean io.EOF, and a payload over
// the reader's limit is refused as errProtocol without reading it;
// an event frame decodeFrame accepts encodes back to one it accepts as the
// same frame; and a Go→kernel command's fields (encodeCommand) split back
// into exactly those fields.
func FuzzFrameRoundTrip(f *testing.F) {
	f.Add([]byte(`{"t":"sync","e":3,"m":1}`), []byte(`{"t":"display","id":2,"main":true,"data":{"text/plain":"\"x\""},"md":{"a":[1]}}`), uint16(100))
	f.Add([]byte(`{"t":"done","id":1,"exit":-1,"json":{"a":null},"repr":"r","err":"e"}`), []byte(`{"t":"error","name":"E","value":"v","tb":"t"}`), uint16(5))
	f.Add([]byte{}, []byte{0xfe, 'K', 0, 0, 0, 1}, uint16(0))
	f.Fuzz(func(t *testing.T, p1, p2 []byte, max uint16) {
		frame := func(p []byte) []byte {
			b := append([]byte{}, frameMagic[:]...)
			b = binary.BigEndian.AppendUint32(b, uint32(len(p)))
			return append(b, p...)
		}
		stream := append(frame(p1), frame(p2)...)
		r := bytes.NewReader(stream)
		for i, want := range [][]byte{p1, p2} {
			got, err := readFrame(r, int(max))
			if len(want) > int(max) {
				if !errors.Is(err, errProtocol) || got != nil {
					t.Fatalf("frame %d of %d bytes over the limit %d: %v", i, len(want), max, err)
				}
				break
			}
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("frame %d: %q, %v; want %q", i, got, err, want)
			}
			if i == 1 {
				if _, err := readFrame(r, int(max)); !errors.Is(err, io.EOF) {
					t.Fatalf("after the last frame: %v, want io.EOF", err)
				}
			}
		}
		for _, p := range [][]byte{p1, p2} {
			fr, err := decodeFrame(p)
			if err != nil {
				if !errors.Is(err, errProtocol) {
					t.Fatalf("refusal is not errProtocol: %v", err)
				}
				continue
			}
			b, err := json.Marshal(fr)
			if err != nil {
				t.Fatalf("accepted frame does not encode: %v", err)
			}
			again, err := decodeFrame(b)
			if err != nil {
				t.Fatalf("accepted frame refused after its round trip: %v (%s)", err, b)
			}
			b2, _ := json.Marshal(again)
			if !bytes.Equal(b, b2) {
				t.Fatalf("round trip changed the frame:\n%s\n%s", b, b2)
			}
		}
		// Go → kernel: encodeCommand's fields split back.
		fields := [][]byte{[]byte("exec"), p1, p2}
		cmd := encodeCommand(fields...)
		if !bytes.Equal(cmd[:2], frameMagic[:]) || int(binary.BigEndian.Uint32(cmd[2:6])) != len(cmd)-frameHeaderLen {
			t.Fatalf("command header %x for %d bytes", cmd[:6], len(cmd))
		}
		var back [][]byte
		for rest := cmd[frameHeaderLen:]; len(rest) > 0; {
			if len(rest) < 4 {
				t.Fatalf("truncated field length in %x", cmd)
			}
			n := int(binary.BigEndian.Uint32(rest))
			if 4+n > len(rest) {
				t.Fatalf("field of %d bytes past the frame's end", n)
			}
			back = append(back, rest[4:4+n])
			rest = rest[4+n:]
		}
		if !reflect.DeepEqual(back, fields) {
			t.Fatalf("fields %q came back as %q", fields, back)
		}
	})
}
