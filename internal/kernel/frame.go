package kernel

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// Framing shared by both directions of the protocol pipes:
//
//	frame   = magic(2: 0xFE 'K') length(4, big endian) payload(length)
//
// Go → kernel payloads are a list of fields, each length(4, big endian) + bytes,
// the first field naming the command ("hello", "exec", "get", "set"); this keeps
// json out of the kernel's startup path. Kernel → Go payloads are one JSON
// object (wireFrame). The magic makes a desynchronised or forged stream fail
// fast instead of being read as a huge length.
var frameMagic = [2]byte{0xFE, 'K'}

const frameHeaderLen = 6

// errProtocol marks a malformed frame from the kernel.
var errProtocol = errors.New("kernel protocol violation")

// encodeCommand builds one Go → kernel frame.
func encodeCommand(fields ...[]byte) []byte {
	n := 0
	for _, f := range fields {
		n += 4 + len(f)
	}
	b := make([]byte, frameHeaderLen, frameHeaderLen+n)
	copy(b, frameMagic[:])
	binary.BigEndian.PutUint32(b[2:], uint32(n))
	for _, f := range fields {
		b = binary.BigEndian.AppendUint32(b, uint32(len(f)))
		b = append(b, f...)
	}
	return b
}

// readFrame reads one kernel → Go frame of at most max payload bytes. The
// kernel never sends more (it checks before sending), so a bigger length, like
// a bad magic, means the stream is corrupt or forged: an errProtocol error,
// after which nothing in the stream can be trusted. Skipping the bytes instead
// would let a forged 4 GiB length swallow every later frame.
func readFrame(r io.Reader, max int) ([]byte, error) {
	var hdr [frameHeaderLen]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("%w: event channel closed in the middle of a frame header", errProtocol)
		}
		return nil, err // io.EOF: clean end
	}
	if hdr[0] != frameMagic[0] || hdr[1] != frameMagic[1] {
		return nil, fmt.Errorf("%w: bad frame magic %q on the event channel", errProtocol, hdr[:2])
	}
	n := int64(binary.BigEndian.Uint32(hdr[2:]))
	if n > int64(max) {
		return nil, fmt.Errorf("%w: %d-byte frame is over the limit of %d", errProtocol, n, max)
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return nil, fmt.Errorf("%w: event channel closed inside a %d-byte frame", errProtocol, n)
	}
	return payload, nil
}

// wireFrame is the union of all kernel → Go event payloads.
type wireFrame struct {
	E    uint64 `json:"e"` // sync epoch: pipes were marked with it before this frame
	M    int    `json:"m"` // bit 1: stdout pipe marked, bit 2: stderr pipe marked
	T    string `json:"t"` // sync | display | error | done | reply
	ID   uint64 `json:"id"`
	Main bool   `json:"main"`

	Data map[string]json.RawMessage `json:"data"`
	MD   map[string]any             `json:"md"`

	Name  string `json:"name"`
	Value string `json:"value"`
	TB    string `json:"tb"`

	Exit *int `json:"exit"`

	JSON json.RawMessage `json:"json"`
	Repr *string         `json:"repr"`
	Err  string          `json:"err"`
}

// decodeFrame parses and validates one event payload.
func decodeFrame(p []byte) (*wireFrame, error) {
	var f wireFrame
	if err := json.Unmarshal(p, &f); err != nil {
		return nil, fmt.Errorf("%w: undecodable event frame: %v", errProtocol, err)
	}
	switch f.T {
	case "sync", "start", "done", "reply", "error":
	case "display":
		if f.Data == nil {
			return nil, fmt.Errorf("%w: display frame without data", errProtocol)
		}
	default:
		return nil, fmt.Errorf("%w: unknown event frame type %q", errProtocol, f.T)
	}
	return &f, nil
}

// Sync markers in the output pipes: 0x1E token ':' decimal-epoch 0x1F.
const (
	markStart   = 0x1E
	markEnd     = 0x1F
	maxEpochLen = 20 // digits of a uint64
)

// markerScanner splits a pipe's byte stream into text and sync markers. It
// keeps at most one potential marker (a few dozen bytes) between calls, so
// memory is bounded no matter what the stream contains. Anything that looks
// like a marker but isn't one exactly is passed through as text.
type markerScanner struct {
	prefix  []byte // markStart + token + ':'
	pending []byte
}

func newMarkerScanner(token []byte) *markerScanner {
	p := append([]byte{markStart}, token...)
	return &markerScanner{prefix: append(p, ':')}
}

// feed scans p. text receives slices that are only valid during the call.
func (s *markerScanner) feed(p []byte, text func([]byte), mark func(uint64)) {
	d := p
	if len(s.pending) > 0 {
		d = append(s.pending, p...)
		s.pending = s.pending[:0]
	}
	for len(d) > 0 {
		j := bytes.Index(d, s.prefix)
		if j < 0 {
			k := partialPrefix(d, s.prefix)
			if len(d)-k > 0 {
				text(d[:len(d)-k])
			}
			s.pending = append(s.pending[:0], d[len(d)-k:]...)
			return
		}
		if j > 0 {
			text(d[:j])
		}
		d = d[j:]
		rest := d[len(s.prefix):]
		i := 0
		for i < len(rest) && i <= maxEpochLen && rest[i] >= '0' && rest[i] <= '9' {
			i++
		}
		if i == len(rest) && i <= maxEpochLen {
			s.pending = append(s.pending[:0], d...) // incomplete marker: wait for more
			return
		}
		if i > 0 && i <= maxEpochLen && rest[i] == markEnd {
			if n, err := strconv.ParseUint(string(rest[:i]), 10, 64); err == nil {
				mark(n)
				d = rest[i+1:]
				continue
			}
		}
		text(d[:1]) // not a marker after all
		d = d[1:]
	}
}

// flush returns what is held back at the end of the stream.
func (s *markerScanner) flush(text func([]byte)) {
	if len(s.pending) > 0 {
		text(s.pending)
		s.pending = s.pending[:0]
	}
}

// partialPrefix is the length of the longest suffix of d that is a proper
// prefix of prefix.
func partialPrefix(d, prefix []byte) int {
	n := len(prefix) - 1
	if n > len(d) {
		n = len(d)
	}
	for ; n > 0; n-- {
		if bytes.Equal(d[len(d)-n:], prefix[:n]) {
			return n
		}
	}
	return 0
}
