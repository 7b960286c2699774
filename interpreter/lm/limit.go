package lm

import (
	"fmt"
	"io"
	"net/http"
)

// limitedHTTPClient returns an *http.Client whose responses fail once they
// exceed max bytes, so a misbehaving server can't make the SDKs buffer
// without bound.
func limitedHTTPClient(base *http.Client, max int64) *http.Client {
	if base == nil {
		base = &http.Client{}
	}
	c := *base
	rt := c.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	c.Transport = limitTransport{base: rt, max: max}
	return &c
}

type limitTransport struct {
	base http.RoundTripper
	max  int64
}

func (t limitTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	resp.Body = &limitBody{rc: resp.Body, left: t.max}
	return resp, nil
}

type limitBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *limitBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One byte more than allowed tells "exactly max" from "too long".
		var one [1]byte
		if n, _ := b.rc.Read(one[:]); n > 0 {
			return 0, fmt.Errorf("%w: the response is larger than %d bytes", ErrInvalidResponse, MaxResponseBytes)
		}
		return b.rc.Read(p[:0])
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *limitBody) Close() error { return b.rc.Close() }
