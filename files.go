package sandboxes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/code-sandboxes/code-sandboxes/internal/client"
)

// Files reads and writes the sandbox's files (E2B's envd /files and
// filesystem service). Paths are absolute, or relative to /home/user.
type Files struct{ s *Sandbox }

// Files returns the sandbox's file system.
func (s *Sandbox) Files() *Files { return &Files{s: s} }

// EntryInfo describes a file or directory.
type EntryInfo = client.Entry

// check says whether the variant has files, and gives the agent client.
func (f *Files) check(what string, capable bool) (*client.Client, error) {
	if !capable {
		return nil, fmt.Errorf("%s: %w (%s)", what, ErrNotSupported, f.s.variant.Name())
	}
	return f.s.conn()
}

// Read streams a file; close the reader.
func (f *Files) Read(ctx context.Context, path string) (io.ReadCloser, error) {
	cl, err := f.s.conn()
	if err != nil {
		return nil, err
	}
	return cl.ReadFile(ctx, path)
}

// MaxReadBytes bounds what ReadBytes holds in memory (a sandbox's largest
// default tmpfs); Read streams files of any size.
const MaxReadBytes = 1 << 30

// MaxListBytes bounds one filesystem answer (List, Stat...) from a sandbox:
// 64 MiB is several hundred thousand entries.
const MaxListBytes = client.MaxListBytes

// ReadBytes reads a whole file of at most MaxReadBytes (a larger one is
// ErrInvalidInput: use Read to stream it).
func (f *Files) ReadBytes(ctx context.Context, path string) ([]byte, error) {
	r, err := f.Read(ctx, path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, MaxReadBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxReadBytes {
		return nil, fmt.Errorf("read %s: %w: larger than %d bytes; use Files().Read to stream it", path, ErrInvalidInput, MaxReadBytes)
	}
	return b, nil
}

// Write streams r into a file, creating parent directories and replacing
// any existing file.
func (f *Files) Write(ctx context.Context, path string, r io.Reader) error {
	cl, err := f.s.conn()
	if err != nil {
		return err
	}
	return cl.WriteFile(ctx, path, r)
}

// WriteBytes writes a whole file.
func (f *Files) WriteBytes(ctx context.Context, path string, b []byte) error {
	return f.Write(ctx, path, bytes.NewReader(b))
}

// List lists a directory, descending depth levels (1 = its entries only).
func (f *Files) List(ctx context.Context, path string, depth int) ([]EntryInfo, error) {
	cl, err := f.check("files", f.s.variant.Capabilities().Files)
	if err != nil {
		return nil, err
	}
	return cl.ListDir(ctx, path, depth)
}

// Stat describes a path.
func (f *Files) Stat(ctx context.Context, path string) (EntryInfo, error) {
	cl, err := f.check("files", f.s.variant.Capabilities().Files)
	if err != nil {
		return EntryInfo{}, err
	}
	return cl.Stat(ctx, path)
}

// Exists reports whether path exists.
func (f *Files) Exists(ctx context.Context, path string) (bool, error) {
	_, err := f.Stat(ctx, path)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// MakeDir creates a directory and its parents; false if it already existed.
func (f *Files) MakeDir(ctx context.Context, path string) (bool, error) {
	cl, err := f.check("files", f.s.variant.Capabilities().Files)
	if err != nil {
		return false, err
	}
	return cl.MakeDir(ctx, path)
}

// Remove removes a file or a directory tree; a missing path is not an error.
func (f *Files) Remove(ctx context.Context, path string) error {
	cl, err := f.check("files", f.s.variant.Capabilities().Files)
	if err != nil {
		return err
	}
	return cl.Remove(ctx, path)
}

// Rename moves a file or directory.
func (f *Files) Rename(ctx context.Context, from, to string) (EntryInfo, error) {
	cl, err := f.check("files", f.s.variant.Capabilities().Files)
	if err != nil {
		return EntryInfo{}, err
	}
	return cl.Move(ctx, from, to)
}

// FileEvent is a change in a watched directory: Name (relative to it) and
// Type (create, write, remove, rename, chmod).
type FileEvent = client.FileEvent

// Watch streams changes under dir to fn until ctx ends. It returns once the
// watch is established; the returned function waits for it to end and gives
// its error.
func (f *Files) Watch(ctx context.Context, dir string, recursive bool, fn func(FileEvent)) (wait func() error, err error) {
	if !f.s.variant.Capabilities().Watch {
		return nil, fmt.Errorf("watch: %w (%s)", ErrNotSupported, f.s.variant.Name())
	}
	cl, err := f.check("files", f.s.variant.Capabilities().Files)
	if err != nil {
		return nil, err
	}
	return cl.WatchDir(ctx, dir, recursive, fn)
}
