package jupyter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/code-sandboxes/code-sandboxes/internal/client"
	fspb "github.com/code-sandboxes/code-sandboxes/internal/envdpb/filesystem"
	"github.com/code-sandboxes/code-sandboxes/internal/envdpb/filesystem/filesystemconnect"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// The variant meets the library through the protocol every sandbox speaks
// (client.Client: E2B's code-interpreter and envd APIs with our /x/
// extensions): an in-process server answers it by translating to the
// Jupyter Server's REST and kernel protocols. Its connections are in
// memory (no socket another process could reach).

// maxBodyBytes bounds what the library sends the adapter in one request
// (code, a variable's value); files are bounded by maxFileBytes.
const maxBodyBytes = 64 << 20

// keepaliveEvery is the silence after which an execution stream carries a
// keepalive line.
var keepaliveEvery = 5 * time.Second

// memListener hands in-memory connections to an http.Server.
type memListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newMemListener() *memListener {
	return &memListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *memListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *memListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *memListener) Addr() net.Addr { return memAddr{} }

func (l *memListener) dial(ctx context.Context) (net.Conn, error) {
	a, b := net.Pipe()
	select {
	case l.conns <- b:
		return a, nil
	case <-l.done:
		a.Close()
		b.Close()
		return nil, fmt.Errorf("%w: the sandbox was released or killed", sberr.ErrClosed)
	case <-ctx.Done():
		a.Close()
		b.Close()
		return nil, ctx.Err()
	}
}

type memAddr struct{}

func (memAddr) Network() string { return "mem" }
func (memAddr) String() string  { return "jupyter-adapter" }

// startAdapter serves the agent protocol for i and sets i.cl.
func (i *instance) startAdapter() {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("POST /execute", i.hExecute)
	mux.HandleFunc("POST /contexts", i.hCreateContext)
	mux.HandleFunc("GET /contexts", i.hListContexts)
	mux.HandleFunc("DELETE /contexts/{id}", i.hDeleteContext)
	mux.HandleFunc("POST /contexts/{id}/restart", i.hRestartContext)
	mux.HandleFunc("POST /x/contexts/{id}/interrupt", i.hInterrupt)
	mux.HandleFunc("GET /x/contexts/{id}/variables/{name}", i.hGetVariable)
	mux.HandleFunc("PUT /x/contexts/{id}/variables/{name}", i.hSetVariable)
	mux.HandleFunc("GET /files", i.hReadFile)
	mux.HandleFunc("POST /files", i.hWriteFile)
	p, h := filesystemconnect.NewFilesystemHandler(fsHandler{i: i}, connect.WithReadMaxBytes(1<<20))
	mux.Handle(p, h)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fail(w, fmt.Errorf("%w: %s %s: a Jupyter Server gives kernels and files, not this (no processes, ports or agent of ours)", sberr.ErrNotSupported, r.Method, r.URL.Path))
	})
	i.ln = newMemListener()
	i.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = i.srv.Serve(i.ln) }()
	dial := i.ln.dial
	hc := &http.Client{Transport: &http.Transport{
		DialContext:         func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
		DisableCompression:  true,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
	}}
	i.cl = client.New(client.Options{EnvdURL: "http://jupyter", HTTPClient: hc})
}

func (i *instance) stopAdapter() {
	if i.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = i.srv.Shutdown(ctx)
		_ = i.srv.Close()
	}
}

// fail answers an error with the status the client maps back to its kind.
func fail(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, sberr.ErrNotFound):
		status = http.StatusNotFound
	case errors.Is(err, sberr.ErrUnauthorized):
		status = http.StatusUnauthorized
	case errors.Is(err, sberr.ErrPermission):
		status = http.StatusForbidden
	case errors.Is(err, sberr.ErrInvalidInput), errors.Is(err, sberr.ErrInvalidConfig):
		status = http.StatusBadRequest
	case errors.Is(err, sberr.ErrAlreadyExists):
		status = http.StatusConflict
	case errors.Is(err, sberr.ErrNotSupported):
		status = http.StatusNotImplemented
	case errors.Is(err, sberr.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		status = http.StatusGatewayTimeout
	case errors.Is(err, sberr.ErrUnavailable), errors.Is(err, sberr.ErrClosed):
		status = http.StatusServiceUnavailable
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"message": err.Error()})
}

func answer(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func readBody(r *http.Request, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: the request exceeds %d bytes", sberr.ErrInvalidInput, limit)
	}
	return b, nil
}

func (i *instance) hExecute(w http.ResponseWriter, r *http.Request) {
	b, err := readBody(r, maxBodyBytes)
	if err != nil {
		fail(w, err)
		return
	}
	var req client.ExecuteRequest
	if err := json.Unmarshal(b, &req); err != nil {
		fail(w, fmt.Errorf("%w: %w", sberr.ErrInvalidInput, err))
		return
	}
	k, err := i.context(r.Context(), req.ContextID, req.Language)
	if err != nil {
		fail(w, err)
		return
	}
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	var mu sync.Mutex
	started, last := false, time.Now()
	emit := func(l line) error {
		mu.Lock()
		defer mu.Unlock()
		if !started {
			started = true
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(http.StatusOK)
		}
		last = time.Now()
		// A caller that stops reading must not hold the kernel forever.
		_ = rc.SetWriteDeadline(time.Now().Add(2 * time.Minute))
		if err := enc.Encode(l); err != nil {
			return err
		}
		return rc.Flush()
	}
	// A keepalive line after keepaliveEvery of silence, as our agent and
	// E2B's server send (the first one starts the stream): the client
	// takes a silent stream for a dead sandbox after its stall timeout (2
	// min), and code may compute for longer without a word.
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(keepaliveEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				mu.Lock()
				idle := time.Since(last) >= keepaliveEvery
				mu.Unlock()
				if idle {
					_ = emit(line{"type": "keepalive"})
				}
			}
		}
	}()
	timeout := time.Duration(req.Timeout * float64(time.Second))
	err = i.execute(r.Context(), k, req.Code, req.EnvVars, timeout, emit)
	close(done)
	wg.Wait()
	if err != nil {
		if !started {
			fail(w, fmt.Errorf("execute: %w", err))
			return
		}
		// The stream already started: the error is a line the caller sees,
		// then the stream ends without end_of_execution (an infrastructure
		// failure, not the code's).
		_ = emit(line{"type": "stderr", "text": "jupyter variant: " + err.Error() + "\n"})
		return
	}
	_ = emit(line{"type": "end_of_execution"})
}

type contextJSON struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

func ctxJSON(k *kctx) contextJSON { return contextJSON{ID: k.id, Language: k.language, Cwd: k.cwd} }

func (i *instance) hCreateContext(w http.ResponseWriter, r *http.Request) {
	b, err := readBody(r, 1<<20)
	if err != nil {
		fail(w, err)
		return
	}
	var in struct {
		Language string `json:"language"`
		Cwd      string `json:"cwd"`
	}
	if len(b) > 0 {
		if err := json.Unmarshal(b, &in); err != nil {
			fail(w, fmt.Errorf("%w: %w", sberr.ErrInvalidInput, err))
			return
		}
	}
	k, err := i.createContext(r.Context(), in.Language, in.Cwd)
	if err != nil {
		fail(w, err)
		return
	}
	answer(w, ctxJSON(k))
}

func (i *instance) hListContexts(w http.ResponseWriter, r *http.Request) {
	out := []contextJSON{}
	for _, k := range i.listContexts() {
		out = append(out, ctxJSON(k))
	}
	answer(w, out)
}

func (i *instance) hDeleteContext(w http.ResponseWriter, r *http.Request) {
	if err := i.deleteContext(r.Context(), r.PathValue("id")); err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// existing finds a context by the id in a path; "default" is the default
// python context, started on first use.
func (i *instance) existing(r *http.Request) (*kctx, error) {
	id := r.PathValue("id")
	if id == "default" {
		id = ""
	}
	return i.context(r.Context(), id, "")
}

func (i *instance) hRestartContext(w http.ResponseWriter, r *http.Request) {
	k, err := i.existing(r)
	if err == nil {
		err = i.restartContext(r.Context(), k)
	}
	if err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (i *instance) hInterrupt(w http.ResponseWriter, r *http.Request) {
	i.ctxMu.Lock()
	id := r.PathValue("id")
	k, ok := i.contexts[id]
	i.ctxMu.Unlock()
	if !ok {
		if id == "default" {
			answer(w, map[string]bool{"interrupted": false}) // not started: nothing runs
			return
		}
		fail(w, fmt.Errorf("context %s: %w", id, sberr.ErrNotFound))
		return
	}
	running, err := i.interrupt(r.Context(), k)
	if err != nil {
		fail(w, err)
		return
	}
	answer(w, map[string]bool{"interrupted": running})
}

func (i *instance) hGetVariable(w http.ResponseWriter, r *http.Request) {
	k, err := i.existing(r)
	if err != nil {
		fail(w, err)
		return
	}
	v, isRepr, err := i.getVariable(r.Context(), k, r.PathValue("name"))
	if err != nil {
		fail(w, err)
		return
	}
	answer(w, map[string]any{"value": v, "repr": isRepr})
}

func (i *instance) hSetVariable(w http.ResponseWriter, r *http.Request) {
	k, err := i.existing(r)
	if err != nil {
		fail(w, err)
		return
	}
	b, err := readBody(r, maxBodyBytes)
	if err != nil {
		fail(w, err)
		return
	}
	isBytes := strings.HasPrefix(r.Header.Get("Content-Type"), "application/octet-stream")
	if err := i.setVariable(r.Context(), k, r.PathValue("name"), b, isBytes); err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (i *instance) hReadFile(w http.ResponseWriter, r *http.Request) {
	rel, err := i.c.rel(r.URL.Query().Get("path"))
	if err != nil {
		fail(w, err)
		return
	}
	b, err := i.c.readFile(r.Context(), rel)
	if err != nil {
		fail(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	_, _ = w.Write(b)
}

func (i *instance) hWriteFile(w http.ResponseWriter, r *http.Request) {
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/octet-stream") {
		fail(w, fmt.Errorf("%w: upload as application/octet-stream, not %q", sberr.ErrNotSupported, ct))
		return
	}
	rel, err := i.c.rel(r.URL.Query().Get("path"))
	if err != nil {
		fail(w, err)
		return
	}
	b, err := readBody(r, maxFileBytes)
	if err != nil {
		fail(w, fmt.Errorf("write %s: %w (the jupyter variant moves files through the contents API, whole)", r.URL.Query().Get("path"), err))
		return
	}
	if err := i.c.writeFile(r.Context(), rel, b); err != nil {
		fail(w, err)
		return
	}
	answer(w, []map[string]string{{"name": path0(rel), "path": "/" + rel, "type": "file"}})
}

func path0(rel string) string {
	if n := strings.LastIndexByte(rel, '/'); n >= 0 {
		return rel[n+1:]
	}
	return rel
}

// fsHandler is envd's filesystem service over the contents API.
type fsHandler struct {
	filesystemconnect.UnimplementedFilesystemHandler
	i *instance
}

func connectErr(err error) error {
	code := connect.CodeInternal
	switch {
	case errors.Is(err, sberr.ErrNotFound):
		code = connect.CodeNotFound
	case errors.Is(err, sberr.ErrAlreadyExists):
		code = connect.CodeAlreadyExists
	case errors.Is(err, sberr.ErrInvalidInput):
		code = connect.CodeInvalidArgument
	case errors.Is(err, sberr.ErrUnauthorized):
		code = connect.CodeUnauthenticated
	case errors.Is(err, sberr.ErrUnavailable):
		code = connect.CodeUnavailable
	case errors.Is(err, sberr.ErrNotSupported):
		code = connect.CodeUnimplemented
	case errors.Is(err, context.DeadlineExceeded):
		code = connect.CodeDeadlineExceeded
	}
	return connect.NewError(code, err)
}

func entry(m model) *fspb.EntryInfo {
	t := fspb.FileType_FILE_TYPE_FILE
	if m.Type == "directory" {
		t = fspb.FileType_FILE_TYPE_DIRECTORY
	}
	mode := modeOf(m)
	e := &fspb.EntryInfo{Name: m.Name, Type: t, Path: "/" + strings.TrimPrefix(m.Path, "/"), Mode: uint32(mode.Perm()),
		Permissions: mode.String()}
	if m.Size != nil {
		e.Size = *m.Size
	}
	if !m.LastModified.IsZero() {
		e.ModifiedTime = timestamppb.New(m.LastModified)
	}
	return e
}

func (h fsHandler) Stat(ctx context.Context, req *connect.Request[fspb.StatRequest]) (*connect.Response[fspb.StatResponse], error) {
	rel, err := h.i.c.rel(req.Msg.GetPath())
	if err != nil {
		return nil, connectErr(err)
	}
	m, err := h.i.c.stat(ctx, rel)
	if err != nil {
		return nil, connectErr(err)
	}
	return connect.NewResponse(&fspb.StatResponse{Entry: entry(m)}), nil
}

func (h fsHandler) ListDir(ctx context.Context, req *connect.Request[fspb.ListDirRequest]) (*connect.Response[fspb.ListDirResponse], error) {
	rel, err := h.i.c.rel(req.Msg.GetPath())
	if err != nil {
		return nil, connectErr(err)
	}
	depth := int(req.Msg.GetDepth())
	if depth < 1 {
		depth = 1
	}
	var ms []model
	if err := h.i.c.list(ctx, rel, depth, &ms); err != nil {
		return nil, connectErr(err)
	}
	out := &fspb.ListDirResponse{}
	for _, m := range ms {
		out.Entries = append(out.Entries, entry(m))
	}
	return connect.NewResponse(out), nil
}

func (h fsHandler) MakeDir(ctx context.Context, req *connect.Request[fspb.MakeDirRequest]) (*connect.Response[fspb.MakeDirResponse], error) {
	rel, err := h.i.c.rel(req.Msg.GetPath())
	if err != nil {
		return nil, connectErr(err)
	}
	made, err := h.i.c.makeDirs(ctx, rel)
	if err != nil {
		return nil, connectErr(err)
	}
	if !made {
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("/%s exists", rel))
	}
	m, err := h.i.c.stat(ctx, rel)
	if err != nil {
		return nil, connectErr(err)
	}
	return connect.NewResponse(&fspb.MakeDirResponse{Entry: entry(m)}), nil
}

func (h fsHandler) Remove(ctx context.Context, req *connect.Request[fspb.RemoveRequest]) (*connect.Response[fspb.RemoveResponse], error) {
	rel, err := h.i.c.rel(req.Msg.GetPath())
	if err != nil {
		return nil, connectErr(err)
	}
	if err := h.i.c.remove(ctx, rel, 0); err != nil {
		return nil, connectErr(err)
	}
	return connect.NewResponse(&fspb.RemoveResponse{}), nil
}

func (h fsHandler) Move(ctx context.Context, req *connect.Request[fspb.MoveRequest]) (*connect.Response[fspb.MoveResponse], error) {
	from, err := h.i.c.rel(req.Msg.GetSource())
	if err != nil {
		return nil, connectErr(err)
	}
	to, err := h.i.c.rel(req.Msg.GetDestination())
	if err != nil {
		return nil, connectErr(err)
	}
	m, err := h.i.c.move(ctx, from, to)
	if err != nil {
		return nil, connectErr(err)
	}
	return connect.NewResponse(&fspb.MoveResponse{Entry: entry(m)}), nil
}
