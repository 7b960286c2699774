package sandboxes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"connectrpc.com/connect"

	"github.com/code-sandboxes/code-sandboxes/internal/client"
	fspb "github.com/code-sandboxes/code-sandboxes/internal/envdpb/filesystem"
	"github.com/code-sandboxes/code-sandboxes/internal/envdpb/filesystem/filesystemconnect"
)

// Files reads and writes the sandbox's files (E2B's envd /files and
// filesystem service). Paths are absolute, or relative to /home/user.
type Files struct{ s *Sandbox }

// Files returns the sandbox's file system.
func (s *Sandbox) Files() *Files { return &Files{s: s} }

// EntryInfo describes a file or directory.
type EntryInfo struct {
	Name          string      `json:"name"`
	Path          string      `json:"path"`
	Type          string      `json:"type"` // file, dir or symlink
	Size          int64       `json:"size"`
	Mode          os.FileMode `json:"mode"`
	Permissions   string      `json:"permissions"`
	Owner         string      `json:"owner"`
	Group         string      `json:"group"`
	ModifiedTime  time.Time   `json:"modified_time"`
	SymlinkTarget string      `json:"symlink_target,omitempty"`
}

func entryOf(e *fspb.EntryInfo) EntryInfo {
	t := ""
	// envd sends permission bits only; the type bits come from the entry's
	// type, so Mode.IsDir() and Mode.String() ("drwxr-xr-x") are right.
	mode := os.FileMode(e.GetMode()) & os.ModePerm
	switch e.GetType() {
	case fspb.FileType_FILE_TYPE_FILE:
		t = "file"
	case fspb.FileType_FILE_TYPE_DIRECTORY:
		t = "dir"
		mode |= os.ModeDir
	case fspb.FileType_FILE_TYPE_SYMLINK:
		t = "symlink"
		mode |= os.ModeSymlink
	}
	return EntryInfo{Name: e.GetName(), Path: e.GetPath(), Type: t, Size: e.GetSize(), Mode: mode,
		Permissions: e.GetPermissions(), Owner: e.GetOwner(), Group: e.GetGroup(),
		ModifiedTime: e.GetModifiedTime().AsTime(), SymlinkTarget: e.GetSymlinkTarget()}
}

func (f *Files) rpc() (filesystemconnect.FilesystemClient, error) {
	if !f.s.variant.Capabilities().Files {
		return nil, fmt.Errorf("files: %w (%s)", ErrNotSupported, f.s.variant.Name())
	}
	cl, err := f.s.conn()
	if err != nil {
		return nil, err
	}
	// A hostile sandbox could answer a listing with any number of entries:
	// the message size is bounded.
	return cl.Filesystem(connect.WithReadMaxBytes(MaxListBytes)), nil
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
const MaxListBytes = 64 << 20

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
	rpc, err := f.rpc()
	if err != nil {
		return nil, err
	}
	if depth < 1 {
		depth = 1
	}
	resp, err := rpc.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: path, Depth: uint32(depth)}))
	if err != nil {
		return nil, client.ConnectError("list "+path, err)
	}
	out := make([]EntryInfo, 0, len(resp.Msg.GetEntries()))
	for _, e := range resp.Msg.GetEntries() {
		out = append(out, entryOf(e))
	}
	return out, nil
}

// Stat describes a path.
func (f *Files) Stat(ctx context.Context, path string) (EntryInfo, error) {
	rpc, err := f.rpc()
	if err != nil {
		return EntryInfo{}, err
	}
	resp, err := rpc.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: path}))
	if err != nil {
		return EntryInfo{}, client.ConnectError("stat "+path, err)
	}
	return entryOf(resp.Msg.GetEntry()), nil
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
	rpc, err := f.rpc()
	if err != nil {
		return false, err
	}
	_, err = rpc.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: path}))
	if connect.CodeOf(err) == connect.CodeAlreadyExists {
		return false, nil
	}
	if err != nil {
		return false, client.ConnectError("mkdir "+path, err)
	}
	return true, nil
}

// Remove removes a file or a directory tree; a missing path is not an error.
func (f *Files) Remove(ctx context.Context, path string) error {
	rpc, err := f.rpc()
	if err != nil {
		return err
	}
	_, err = rpc.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: path}))
	return client.ConnectError("remove "+path, err)
}

// Rename moves a file or directory.
func (f *Files) Rename(ctx context.Context, from, to string) (EntryInfo, error) {
	rpc, err := f.rpc()
	if err != nil {
		return EntryInfo{}, err
	}
	resp, err := rpc.Move(ctx, connect.NewRequest(&fspb.MoveRequest{Source: from, Destination: to}))
	if err != nil {
		return EntryInfo{}, client.ConnectError("rename "+from, err)
	}
	return entryOf(resp.Msg.GetEntry()), nil
}

// FileEvent is a change in a watched directory.
type FileEvent struct {
	Name string // relative to the watched directory
	Type string // create, write, remove, rename, chmod
}

// Watch streams changes under dir to fn until ctx ends. It returns once the
// watch is established; the returned function waits for it to end and gives
// its error.
func (f *Files) Watch(ctx context.Context, dir string, recursive bool, fn func(FileEvent)) (wait func() error, err error) {
	if !f.s.variant.Capabilities().Watch {
		return nil, fmt.Errorf("watch: %w (%s)", ErrNotSupported, f.s.variant.Name())
	}
	rpc, err := f.rpc()
	if err != nil {
		return nil, err
	}
	stream, err := rpc.WatchDir(ctx, connect.NewRequest(&fspb.WatchDirRequest{Path: dir, Recursive: recursive}))
	if err != nil {
		return nil, client.ConnectError("watch "+dir, err)
	}
	if !stream.Receive() || stream.Msg().GetStart() == nil {
		err := stream.Err()
		stream.Close()
		if err == nil {
			err = fmt.Errorf("%w: expected a start event", ErrUnavailable)
		}
		return nil, client.ConnectError("watch "+dir, err)
	}
	done := make(chan error, 1)
	go func() {
		defer stream.Close()
		for stream.Receive() {
			if ev := stream.Msg().GetFilesystem(); ev != nil {
				t := ""
				switch ev.GetType() {
				case fspb.EventType_EVENT_TYPE_CREATE:
					t = "create"
				case fspb.EventType_EVENT_TYPE_WRITE:
					t = "write"
				case fspb.EventType_EVENT_TYPE_REMOVE:
					t = "remove"
				case fspb.EventType_EVENT_TYPE_RENAME:
					t = "rename"
				case fspb.EventType_EVENT_TYPE_CHMOD:
					t = "chmod"
				}
				fn(FileEvent{Name: ev.GetName(), Type: t})
			}
		}
		err := stream.Err()
		if ctx.Err() != nil {
			err = nil
		}
		done <- err
	}()
	return func() error { return <-done }, nil
}
