package egress

import (
	"bytes"
	"crypto/tls"
	"net"
	"testing"
	"time"
)

// clientHello is what a TLS client sends first for server name sni.
func clientHello(t testing.TB, sni string) []byte {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go func() {
		_ = tls.Client(a, &tls.Config{ServerName: sni, InsecureSkipVerify: true}).Handshake()
	}()
	_ = b.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 16<<10)
	n, err := b.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n]
}

func sniff(first []byte) (string, []byte, error) {
	a, b := net.Pipe()
	defer b.Close()
	go func() { _, _ = a.Write(first); a.Close() }()
	return sniffName(b)
}

func TestSniffName(t *testing.T) {
	for _, tc := range []struct {
		first []byte
		want  string
	}{
		{clientHello(t, "api.example.com"), "api.example.com"},
		{clientHello(t, "API.Example.COM."), "api.example.com"},
		{[]byte("GET / HTTP/1.1\r\nHost: www.example.org:8080\r\n\r\n"), "www.example.org"},
		{[]byte("POST /x HTTP/1.1\r\nHost: a.example\r\nContent-Length: 3\r\n\r\nabc"), "a.example"},
		{[]byte("GET / HTTP/1.0\r\n\r\n"), ""},           // no Host
		{[]byte("hello\n"), ""},                          // not HTTP
		{[]byte("\x00\x1d\x12\x34"), ""},                 // DNS over TCP
		{[]byte("SSH-2.0-OpenSSH_9.2\r\n"), ""},          // no Host
		{[]byte("\x16\x03\x01\x00\x05hello"), ""},        // a broken hello
		{[]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), ""}, // h2 prior knowledge: no Host
	} {
		name, replay, err := sniff(tc.first)
		if name != tc.want || (tc.want == "") != (err != nil) {
			t.Errorf("sniff(%.40q) = %q, %v; want %q", tc.first, name, err, tc.want)
		}
		// What was read is replayed to the server, byte for byte.
		if tc.want != "" && !bytes.HasPrefix(tc.first, replay) && !bytes.Equal(tc.first, replay) {
			t.Errorf("replay of %.40q is %.40q", tc.first, replay)
		}
	}
}

// FuzzSniffName: bytes from the sandbox never make it panic, and never
// more than maxSniff of them are held.
func FuzzSniffName(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	f.Add([]byte("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, replay, _ := sniff(b)
		if len(replay) > maxSniff {
			t.Fatalf("held %d bytes", len(replay))
		}
	})
}
