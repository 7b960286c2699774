package jupyter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// Bounds of the kernel's WebSocket: one message (a display of a large
// image is a few MiB of base64; past this the connection is dropped), the
// handshake, a write, and the messages queued for one execution.
const (
	maxMessageBytes = 32 << 20
	dialTimeout     = 30 * time.Second
	writeTimeout    = 30 * time.Second
	waiterQueue     = 256
)

// protocolVersion is the Jupyter messaging protocol version we speak.
const protocolVersion = "5.3"

// message is a Jupyter message as the server's kernel WebSocket carries it
// (JSON, no subprotocol).
type message struct {
	Header       header          `json:"header"`
	ParentHeader header          `json:"parent_header"`
	Metadata     json.RawMessage `json:"metadata"`
	Content      json.RawMessage `json:"content"`
	Channel      string          `json:"channel"`
	Buffers      []any           `json:"buffers"`
}

type header struct {
	MsgID    string `json:"msg_id,omitempty"`
	MsgType  string `json:"msg_type,omitempty"`
	Username string `json:"username,omitempty"`
	Session  string `json:"session,omitempty"`
	Date     string `json:"date,omitempty"`
	Version  string `json:"version,omitempty"`
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// kernelConn is one WebSocket to a kernel's channels. Replies are routed to
// the request that caused them by their parent's msg_id.
type kernelConn struct {
	ws      *websocket.Conn
	session string
	wmu     sync.Mutex

	mu      sync.Mutex
	waiters map[string]*waiter
	dead    chan struct{} // closed when the connection ends
	err     error         // why, set before dead closes
}

type waiter struct {
	ch   chan *message
	done chan struct{}
}

// dialKernel opens the channels WebSocket of kernel id.
func dialKernel(ctx context.Context, c *conf, id string) (*kernelConn, error) {
	u := *c.base
	switch u.Scheme {
	case "https":
		u.Scheme = "wss"
	default:
		u.Scheme = "ws"
	}
	sess := newID()
	u.Path += "/api/kernels/" + url.PathEscape(id) + "/channels"
	u.RawQuery = url.Values{"session_id": {sess}}.Encode()
	h := http.Header{}
	c.headers(h)
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	ws, resp, err := websocket.Dial(dctx, u.String(), &websocket.DialOptions{HTTPClient: c.hc, HTTPHeader: h})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return nil, answerError("connect to kernel "+id, resp)
		}
		return nil, fmt.Errorf("connect to kernel %s: %w: %w", id, sberr.ErrUnavailable, err)
	}
	ws.SetReadLimit(maxMessageBytes)
	k := &kernelConn{ws: ws, session: sess, waiters: map[string]*waiter{}, dead: make(chan struct{})}
	go k.read()
	return k, nil
}

// read routes every message to its waiter until the connection ends. A
// kernel that restarts or dies is told to every waiter: their executions
// will get no more answers.
func (k *kernelConn) read() {
	var err error
	for {
		var typ websocket.MessageType
		var b []byte
		typ, b, err = k.ws.Read(context.Background())
		if err != nil {
			break
		}
		if typ != websocket.MessageText {
			continue // binary frames are the v1 subprotocol's, which we don't ask for
		}
		var m message
		if json.Unmarshal(b, &m) != nil {
			continue
		}
		k.route(&m)
	}
	k.mu.Lock()
	k.err = fmt.Errorf("%w: the kernel's connection ended: %w", sberr.ErrUnavailable, err)
	k.mu.Unlock()
	close(k.dead)
}

func (k *kernelConn) route(m *message) {
	var targets []*waiter
	k.mu.Lock()
	if w, ok := k.waiters[m.ParentHeader.MsgID]; ok && m.ParentHeader.MsgID != "" {
		targets = append(targets, w)
	} else if m.Header.MsgType == "status" {
		var st struct {
			State string `json:"execution_state"`
		}
		_ = json.Unmarshal(m.Content, &st)
		if st.State == "restarting" || st.State == "dead" || st.State == "autorestarting" {
			for _, w := range k.waiters {
				targets = append(targets, w)
			}
		}
	}
	k.mu.Unlock()
	for _, w := range targets {
		select {
		case w.ch <- m:
		case <-w.done:
		}
	}
}

// request sends a message on a channel and returns the waiter of its
// answers; call the returned stop when done.
func (k *kernelConn) request(ctx context.Context, channel, msgType string, content any) (*waiter, func(), error) {
	id := newID()
	w := &waiter{ch: make(chan *message, waiterQueue), done: make(chan struct{})}
	k.mu.Lock()
	k.waiters[id] = w
	k.mu.Unlock()
	stop := func() {
		k.mu.Lock()
		delete(k.waiters, id)
		k.mu.Unlock()
		close(w.done)
	}
	cb, err := json.Marshal(content)
	if err != nil {
		stop()
		return nil, nil, err
	}
	m := message{
		Header:   header{MsgID: id, MsgType: msgType, Username: "code-sandboxes", Session: k.session, Date: time.Now().UTC().Format(time.RFC3339Nano), Version: protocolVersion},
		Metadata: json.RawMessage("{}"), Content: cb, Channel: channel, Buffers: []any{},
	}
	b, err := json.Marshal(m)
	if err != nil {
		stop()
		return nil, nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	k.wmu.Lock()
	err = k.ws.Write(wctx, websocket.MessageText, b)
	k.wmu.Unlock()
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("%w: sending %s to the kernel: %w", sberr.ErrUnavailable, msgType, err)
	}
	return w, stop, nil
}

// next waits for the next answer of w.
func (k *kernelConn) next(ctx context.Context, w *waiter) (*message, error) {
	select {
	case m := <-w.ch:
		return m, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-k.dead:
		// Answers routed before the end are still queued.
		select {
		case m := <-w.ch:
			return m, nil
		default:
		}
		k.mu.Lock()
		defer k.mu.Unlock()
		return nil, k.err
	}
}

// ready waits until the kernel answers kernel_info_request (it answers
// once it runs), and gives its language. A request sent before the server
// had the kernel's channels may be lost, so it is repeated.
func (k *kernelConn) ready(ctx context.Context) (string, error) {
	for {
		lang, err := k.kernelInfo(ctx, 3*time.Second)
		if err == nil || !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			if err != nil {
				err = fmt.Errorf("waiting for the kernel: %w", err)
			}
			return lang, err
		}
	}
}

func (k *kernelConn) kernelInfo(ctx context.Context, d time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	w, stop, err := k.request(ctx, "shell", "kernel_info_request", struct{}{})
	if err != nil {
		return "", err
	}
	defer stop()
	for {
		m, err := k.next(ctx, w)
		if err != nil {
			return "", err
		}
		if m.Header.MsgType == "kernel_info_reply" {
			var c struct {
				LanguageInfo struct {
					Name string `json:"name"`
				} `json:"language_info"`
			}
			_ = json.Unmarshal(m.Content, &c)
			return strings.ToLower(c.LanguageInfo.Name), nil
		}
	}
}

func (k *kernelConn) close() {
	_ = k.ws.Close(websocket.StatusNormalClosure, "")
	select {
	case <-k.dead:
	case <-time.After(5 * time.Second):
		_ = k.ws.CloseNow()
	}
}

// errKernelDied is the end of an execution whose kernel restarted or died.
var errKernelDied = errors.New("the kernel died or restarted")
