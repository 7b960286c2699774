// File transfers through the agent (/files), moved a large chunk at a time.

package client

import (
	"context"
	"io"
	"net/http"
	"net/url"
)

// ReadFile streams a file out of the sandbox.
func (c *Client) ReadFile(ctx context.Context, path string) (io.ReadCloser, error) {
	q := url.Values{"path": {path}}
	if c.o.User != "" {
		q.Set("username", c.o.User)
	}
	resp, err := c.do(ctx, "read "+path, http.MethodGet, c.o.EnvdURL+"/files?"+q.Encode(), c.EnvdHeaders(), nil, "")
	if err != nil {
		return nil, err
	}
	return bigChunkBody{resp.Body}, nil
}

// fileChunk is the unit a file moves in: io.Copy's 32 KiB (8 KiB into
// io.Discard) costs a system call or two per chunk at each end, which
// bounded transfers to a few hundred MB/s; 1 MiB is a flat amount of memory
// per transfer, whatever the file's size.
const fileChunk = 1 << 20

// bigChunkBody makes io.Copy from a download move fileChunk at a time.
type bigChunkBody struct{ io.ReadCloser }

func (b bigChunkBody) WriteTo(w io.Writer) (int64, error) {
	return io.CopyBuffer(w, struct{ io.Reader }{b.ReadCloser}, make([]byte, fileChunk))
}

// bigChunkReader makes the HTTP transport's copy of an upload move
// fileChunk at a time (it unwraps the body and uses io.Copy, which takes a
// WriterTo).
type bigChunkReader struct{ r io.Reader }

func (b bigChunkReader) Read(p []byte) (int, error) { return b.r.Read(p) }

func (b bigChunkReader) WriteTo(w io.Writer) (int64, error) {
	return io.CopyBuffer(w, struct{ io.Reader }{b.r}, make([]byte, fileChunk))
}

// WriteFile streams r into a file in the sandbox (octet-stream upload,
// envd ≥ 0.5.7), creating parent directories.
func (c *Client) WriteFile(ctx context.Context, path string, r io.Reader) error {
	q := url.Values{"path": {path}}
	if c.o.User != "" {
		q.Set("username", c.o.User)
	}
	resp, err := c.do(ctx, "write "+path, http.MethodPost, c.o.EnvdURL+"/files?"+q.Encode(), c.EnvdHeaders(), bigChunkReader{r}, "application/octet-stream")
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	return nil
}
