package client

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"connectrpc.com/connect"

	fspb "github.com/code-sandboxes/code-sandboxes/internal/envdpb/filesystem"
	"github.com/code-sandboxes/code-sandboxes/internal/envdpb/filesystem/filesystemconnect"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// MaxListBytes bounds one filesystem answer (a listing, a stat) from a
// sandbox: 64 MiB is several hundred thousand entries, and a hostile
// sandbox could otherwise answer with any number of them.
const MaxListBytes = 64 << 20

// Entry describes a file or directory (envd's EntryInfo).
type Entry struct {
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

func entryOf(e *fspb.EntryInfo) Entry {
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
	return Entry{Name: e.GetName(), Path: e.GetPath(), Type: t, Size: e.GetSize(), Mode: mode,
		Permissions: e.GetPermissions(), Owner: e.GetOwner(), Group: e.GetGroup(),
		ModifiedTime: e.GetModifiedTime().AsTime(), SymlinkTarget: e.GetSymlinkTarget()}
}

func (c *Client) fs() filesystemconnect.FilesystemClient {
	return c.Filesystem(connect.WithReadMaxBytes(MaxListBytes))
}

// ListDir lists a directory, descending depth levels (1 = its entries).
func (c *Client) ListDir(ctx context.Context, path string, depth int) ([]Entry, error) {
	if depth < 1 {
		depth = 1
	}
	resp, err := c.fs().ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: path, Depth: uint32(depth)}))
	if err != nil {
		return nil, ConnectError("list "+path, err)
	}
	out := make([]Entry, 0, len(resp.Msg.GetEntries()))
	for _, e := range resp.Msg.GetEntries() {
		out = append(out, entryOf(e))
	}
	return out, nil
}

// Stat describes a path.
func (c *Client) Stat(ctx context.Context, path string) (Entry, error) {
	resp, err := c.fs().Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: path}))
	if err != nil {
		return Entry{}, ConnectError("stat "+path, err)
	}
	return entryOf(resp.Msg.GetEntry()), nil
}

// MakeDir creates a directory and its parents; false if it already existed.
func (c *Client) MakeDir(ctx context.Context, path string) (bool, error) {
	_, err := c.fs().MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: path}))
	if connect.CodeOf(err) == connect.CodeAlreadyExists {
		return false, nil
	}
	if err != nil {
		return false, ConnectError("mkdir "+path, err)
	}
	return true, nil
}

// Remove removes a file or a directory tree.
func (c *Client) Remove(ctx context.Context, path string) error {
	_, err := c.fs().Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: path}))
	return ConnectError("remove "+path, err)
}

// Move renames a file or directory.
func (c *Client) Move(ctx context.Context, from, to string) (Entry, error) {
	resp, err := c.fs().Move(ctx, connect.NewRequest(&fspb.MoveRequest{Source: from, Destination: to}))
	if err != nil {
		return Entry{}, ConnectError("rename "+from, err)
	}
	return entryOf(resp.Msg.GetEntry()), nil
}

// FileEvent is a change in a watched directory.
type FileEvent struct {
	Name string // relative to the watched directory
	Type string // create, write, remove, rename, chmod
}

var eventTypes = map[fspb.EventType]string{
	fspb.EventType_EVENT_TYPE_CREATE: "create",
	fspb.EventType_EVENT_TYPE_WRITE:  "write",
	fspb.EventType_EVENT_TYPE_REMOVE: "remove",
	fspb.EventType_EVENT_TYPE_RENAME: "rename",
	fspb.EventType_EVENT_TYPE_CHMOD:  "chmod",
}

// WatchDir streams changes under dir to fn until ctx ends. It returns once
// the watch is established; wait waits for it to end and gives its error.
func (c *Client) WatchDir(ctx context.Context, dir string, recursive bool, fn func(FileEvent)) (wait func() error, err error) {
	stream, err := c.fs().WatchDir(ctx, connect.NewRequest(&fspb.WatchDirRequest{Path: dir, Recursive: recursive}))
	if err != nil {
		return nil, ConnectError("watch "+dir, err)
	}
	if !stream.Receive() || stream.Msg().GetStart() == nil {
		err := stream.Err()
		stream.Close()
		if err == nil {
			err = fmt.Errorf("%w: expected a start event", sberr.ErrUnavailable)
		}
		return nil, ConnectError("watch "+dir, err)
	}
	done := make(chan error, 1)
	go func() {
		defer stream.Close()
		for stream.Receive() {
			if ev := stream.Msg().GetFilesystem(); ev != nil {
				fn(FileEvent{Name: ev.GetName(), Type: eventTypes[ev.GetType()]})
			}
		}
		err := stream.Err()
		if ctx.Err() != nil || errors.Is(err, context.Canceled) {
			err = nil
		}
		done <- err
	}()
	return func() error { return <-done }, nil
}
