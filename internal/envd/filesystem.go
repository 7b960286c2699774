package envd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	fspb "github.com/code-sandboxes/code-sandboxes/internal/envdpb/filesystem"
	"github.com/code-sandboxes/code-sandboxes/internal/envdpb/filesystem/filesystemconnect"
	secsconv "github.com/code-sandboxes/code-sandboxes/internal/secs"
)

// FilesystemService implements filesystem.Filesystem.
type FilesystemService struct {
	opts Options

	mu       sync.Mutex
	watchers map[string]*pollWatcher
	closed   bool
}

var _ filesystemconnect.FilesystemHandler = (*FilesystemService)(nil)

// NewFilesystemService returns the filesystem service.
func NewFilesystemService(opts Options) *FilesystemService {
	return &FilesystemService{opts: opts, watchers: map[string]*pollWatcher{}}
}

// Handler returns the mount path and HTTP handler of the service.
func (s *FilesystemService) Handler(opts ...connect.HandlerOption) (string, http.Handler) {
	return filesystemconnect.NewFilesystemHandler(s, opts...)
}

// Close stops all watchers created with CreateWatcher.
func (s *FilesystemService) Close() {
	s.mu.Lock()
	ws := s.watchers
	s.watchers = map[string]*pollWatcher{}
	s.closed = true
	s.mu.Unlock()
	for _, w := range ws {
		w.w.close()
	}
}

// path resolves a request path for the request's user.
func (s *FilesystemService) path(h http.Header, p string) (string, User, error) {
	u, err := s.opts.connectUser(h)
	if err != nil {
		return "", User{}, err
	}
	abs, err := resolvePath(p, u, s.opts.DefaultWorkdir)
	if err != nil {
		return "", User{}, connect.NewError(connect.CodeInvalidArgument, err)
	}
	return abs, u, nil
}

func (s *FilesystemService) Stat(ctx context.Context, req *connect.Request[fspb.StatRequest]) (*connect.Response[fspb.StatResponse], error) {
	if r, ok, err := viaHelperFor[fspb.StatResponse](ctx, s, req.Header(), "Stat", req.Msg); ok {
		return r, err
	}
	p, _, err := s.path(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	if err := guardProc(p, false); err != nil {
		return nil, err
	}
	e, err := entryInfo(p)
	if err != nil {
		return nil, fsError("stat "+p, err)
	}
	return connect.NewResponse(&fspb.StatResponse{Entry: e}), nil
}

func (s *FilesystemService) MakeDir(ctx context.Context, req *connect.Request[fspb.MakeDirRequest]) (*connect.Response[fspb.MakeDirResponse], error) {
	if r, ok, err := viaHelperFor[fspb.MakeDirResponse](ctx, s, req.Header(), "MakeDir", req.Msg); ok {
		return r, err
	}
	p, u, err := s.path(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	if err := guardProc(p, true); err != nil {
		return nil, err
	}
	if fi, err := os.Stat(p); err == nil {
		if fi.IsDir() {
			return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("directory already exists: %s", p))
		}
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path already exists but is not a directory: %s", p))
	}
	if err := mkdirAllAs(p, u); err != nil {
		return nil, fsError("make directory "+p, err)
	}
	e, err := entryInfo(p)
	if err != nil {
		return nil, fsError("stat "+p, err)
	}
	return connect.NewResponse(&fspb.MakeDirResponse{Entry: e}), nil
}

func (s *FilesystemService) Move(ctx context.Context, req *connect.Request[fspb.MoveRequest]) (*connect.Response[fspb.MoveResponse], error) {
	if r, ok, err := viaHelperFor[fspb.MoveResponse](ctx, s, req.Header(), "Move", req.Msg); ok {
		return r, err
	}
	src, u, err := s.path(req.Header(), req.Msg.GetSource())
	if err != nil {
		return nil, err
	}
	dst, _, err := s.path(req.Header(), req.Msg.GetDestination())
	if err != nil {
		return nil, err
	}
	for _, q := range []string{src, dst} {
		if err := guardProc(q, false); err != nil {
			return nil, err
		}
	}
	if _, err := os.Lstat(src); err != nil {
		return nil, fsError("source "+src, err)
	}
	if err := mkdirAllAs(filepath.Dir(dst), u); err != nil {
		return nil, fsError("create parent of "+dst, err)
	}
	if err := os.Rename(src, dst); err != nil {
		return nil, fsError(fmt.Sprintf("move %s to %s", src, dst), err)
	}
	e, err := entryInfo(dst)
	if err != nil {
		return nil, fsError("stat "+dst, err)
	}
	return connect.NewResponse(&fspb.MoveResponse{Entry: e}), nil
}

func (s *FilesystemService) ListDir(ctx context.Context, req *connect.Request[fspb.ListDirRequest]) (*connect.Response[fspb.ListDirResponse], error) {
	if r, ok, err := viaHelperFor[fspb.ListDirResponse](ctx, s, req.Header(), "ListDir", req.Msg); ok {
		return r, err
	}
	root, _, err := s.path(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	if err := guardProc(root, true); err != nil {
		return nil, err
	}
	depth := int(req.Msg.GetDepth())
	if depth < 1 {
		depth = 1
	}
	// Follow a symlinked root (ls does too), but never symlinks below it:
	// that could loop forever.
	fi, err := os.Stat(root)
	if err != nil {
		return nil, fsError("list "+root, err)
	}
	if !fi.IsDir() {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path is not a directory: %s", root))
	}
	var entries []*fspb.EntryInfo
	var walk func(dir string, level int) error
	walk = func(dir string, level int) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		des, err := os.ReadDir(dir)
		if err != nil {
			if dir != root && (errors.Is(err, fs.ErrPermission) || errors.Is(err, fs.ErrNotExist)) {
				return nil // unreadable or vanished subdirectory: skip it
			}
			return err
		}
		for _, de := range des {
			p := filepath.Join(dir, de.Name())
			info, err := de.Info()
			if err != nil {
				continue // removed while listing
			}
			entries = append(entries, entryInfoFrom(p, info))
			if level < depth && de.IsDir() {
				if err := walk(p, level+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(root, 1); err != nil {
		if ctx.Err() != nil {
			return nil, connect.NewError(connect.CodeCanceled, err)
		}
		return nil, fsError("list "+root, err)
	}
	return connect.NewResponse(&fspb.ListDirResponse{Entries: entries}), nil
}

func (s *FilesystemService) Remove(ctx context.Context, req *connect.Request[fspb.RemoveRequest]) (*connect.Response[fspb.RemoveResponse], error) {
	if r, ok, err := viaHelperFor[fspb.RemoveResponse](ctx, s, req.Header(), "Remove", req.Msg); ok {
		return r, err
	}
	p, _, err := s.path(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	if p == "/" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("refusing to remove /"))
	}
	if err := guardProc(p, false); err != nil {
		return nil, err
	}
	if err := os.RemoveAll(p); err != nil {
		return nil, fsError("remove "+p, err)
	}
	return connect.NewResponse(&fspb.RemoveResponse{}), nil
}

// watchParams is the common part of WatchDirRequest and CreateWatcherRequest.
type watchParams struct {
	path         string
	recursive    bool
	includeEntry bool
	allowNetwork bool
}

func (s *FilesystemService) startWatch(h http.Header, wp watchParams, queue int, dropWhenFull bool) (*dirWatcher, error) {
	p, u, err := s.path(h, wp.path)
	if err != nil {
		return nil, err
	}
	if s.alien(u) {
		return s.helperWatcher(u, wp, queue, dropWhenFull)
	}
	if err := guardProc(p, true); err != nil {
		return nil, err
	}
	fi, err := os.Stat(p)
	if err != nil {
		return nil, fsError("watch "+p, err)
	}
	if !fi.IsDir() {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path is not a directory: %s", p))
	}
	if !wp.allowNetwork {
		if fsName, ok := networkFS(p); ok {
			return nil, connect.NewError(connect.CodeFailedPrecondition,
				fmt.Errorf("%s is on a network filesystem (%s); inotify misses remote changes there, pass allow_network_mounts to watch anyway", p, fsName))
		}
	}
	w, err := newDirWatcher(p, wp.recursive, wp.includeEntry, queue, dropWhenFull)
	if err != nil {
		return nil, fsError("watch "+p, err)
	}
	return w, nil
}

func (s *FilesystemService) WatchDir(ctx context.Context, req *connect.Request[fspb.WatchDirRequest], stream *connect.ServerStream[fspb.WatchDirResponse]) error {
	m := req.Msg
	// A stream applies backpressure: while the client is slow the reader
	// stops draining inotify, whose kernel queue is bounded (overflow is
	// reported by the kernel and logged as dropped events).
	w, err := s.startWatch(req.Header(), watchParams{m.GetPath(), m.GetRecursive(), m.GetIncludeEntry(), m.GetAllowNetworkMounts()}, 256, false)
	if err != nil {
		return err
	}
	defer w.close()
	if err := stream.Send(&fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Start{Start: &fspb.WatchDirResponse_StartEvent{}}}); err != nil {
		return err
	}
	interval := keepaliveInterval(req.Header(), s.opts.keepalive())
	ka := time.NewTimer(interval)
	defer ka.Stop()
	for {
		select {
		case <-ctx.Done():
			return streamCtxErr(ctx)
		case <-ka.C:
			if err := stream.Send(&fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Keepalive{Keepalive: &fspb.WatchDirResponse_KeepAlive{}}}); err != nil {
				return err
			}
		case ev, ok := <-w.events:
			if !ok {
				if err := w.err(); err != nil {
					return connect.NewError(connect.CodeInternal, fmt.Errorf("watch %s: %w", w.root, err))
				}
				return nil
			}
			if err := stream.Send(&fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Filesystem{Filesystem: ev}}); err != nil {
				return err
			}
		}
		ka.Reset(interval)
	}
}

// pollWatcher is a watcher created by CreateWatcher and drained by
// GetWatcherEvents.
type pollWatcher struct {
	w *dirWatcher
}

// maxPolledEvents bounds the events kept for a watcher nobody polls; newer
// events are dropped beyond it (a client that polls rarely gets a prefix).
const maxPolledEvents = 4096

func (s *FilesystemService) CreateWatcher(_ context.Context, req *connect.Request[fspb.CreateWatcherRequest]) (*connect.Response[fspb.CreateWatcherResponse], error) {
	m := req.Msg
	w, err := s.startWatch(req.Header(), watchParams{m.GetPath(), m.GetRecursive(), m.GetIncludeEntry(), m.GetAllowNetworkMounts()}, maxPolledEvents, true)
	if err != nil {
		return nil, err
	}
	id := randomID()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		w.close()
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("filesystem service is shutting down"))
	}
	s.watchers[id] = &pollWatcher{w: w}
	s.mu.Unlock()
	return connect.NewResponse(&fspb.CreateWatcherResponse{WatcherId: id}), nil
}

func (s *FilesystemService) watcher(id string) (*pollWatcher, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pw, ok := s.watchers[id]
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher %q not found", id))
	}
	return pw, nil
}

func (s *FilesystemService) GetWatcherEvents(_ context.Context, req *connect.Request[fspb.GetWatcherEventsRequest]) (*connect.Response[fspb.GetWatcherEventsResponse], error) {
	pw, err := s.watcher(req.Msg.GetWatcherId())
	if err != nil {
		return nil, err
	}
	var evs []*fspb.FilesystemEvent
	for {
		select {
		case ev, ok := <-pw.w.events:
			if !ok {
				if err := pw.w.err(); err != nil && len(evs) == 0 {
					return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("watcher failed: %w", err))
				}
				return connect.NewResponse(&fspb.GetWatcherEventsResponse{Events: evs}), nil
			}
			evs = append(evs, ev)
			continue
		default:
		}
		return connect.NewResponse(&fspb.GetWatcherEventsResponse{Events: evs}), nil
	}
}

func (s *FilesystemService) RemoveWatcher(_ context.Context, req *connect.Request[fspb.RemoveWatcherRequest]) (*connect.Response[fspb.RemoveWatcherResponse], error) {
	id := req.Msg.GetWatcherId()
	s.mu.Lock()
	pw, ok := s.watchers[id]
	delete(s.watchers, id)
	s.mu.Unlock()
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher %q not found", id))
	}
	pw.w.close()
	return connect.NewResponse(&fspb.RemoveWatcherResponse{}), nil
}

// keepaliveInterval reads the Keepalive-Ping-Interval header (seconds).
func keepaliveInterval(h http.Header, def time.Duration) time.Duration {
	v := strings.TrimSpace(h.Get("Keepalive-Ping-Interval"))
	if v == "" {
		return def
	}
	var secs float64
	if _, err := fmt.Sscan(v, &secs); err != nil || secs <= 0 {
		return def
	}
	return secsconv.Duration(secs)
}

// streamCtxErr converts the end of a stream's context into a Connect error.
func streamCtxErr(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
	}
	return connect.NewError(connect.CodeCanceled, ctx.Err())
}
