package agent

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/rawio"
)

// ExecUpgrade is the Upgrade token of the lean execution connection
// (GET /x/exec, docs/agent-protocol.md): after the 101, the client sends
// requests framed as a 4-byte big-endian length and the /execute JSON body,
// one at a time, and reads each one's NDJSON lines up to and including
// end_of_execution. It saves what HTTP costs per execution (a request to
// parse, headers both ways, chunked framing, the transport's goroutine
// hand-offs). E2B's SDKs keep using /execute; serve answers their /execute
// over this connection (internal/e2bserver/proxy_execute.go).
const ExecUpgrade = "cs-exec"

// handleExecConn upgrades to the lean execution connection. The token was
// checked on the upgrade request (auth wraps every route); each execution
// then counts as use of the sandbox, as an /execute request does, and a
// client that goes away interrupts the cell it was running.
func (s *Server) handleExecConn(w http.ResponseWriter, r *http.Request) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), ExecUpgrade) {
		textError(w, http.StatusBadRequest, "send Connection: Upgrade and Upgrade: "+ExecUpgrade)
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		textError(w, http.StatusInternalServerError, "cannot upgrade this connection: "+err.Error())
		return
	}
	_ = conn.SetDeadline(time.Time{})
	_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + ExecUpgrade + "\r\n\r\n")
	if err := brw.Flush(); err != nil {
		conn.Close()
		return
	}
	go s.serveExecConn(conn, brw.Reader)
}

func (s *Server) serveExecConn(conn net.Conn, hbr *bufio.Reader) {
	defer conn.Close()
	// Requests and answers go through raw reads and writes where the
	// socket allows (internal/rawio: the runtime's sysmon thread stays
	// asleep between executions), after whatever the upgrade's reader had
	// buffered already.
	var rd io.Reader = rawio.Reader(conn)
	if n := hbr.Buffered(); n > 0 {
		early, _ := hbr.Peek(n)
		rd = io.MultiReader(bytes.NewReader(bytes.Clone(early)), rd)
	}
	br := bufio.NewReaderSize(rd, 4096)
	reqs := make(chan []byte)
	gone := make(chan struct{}) // the client closed, or broke the framing
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		defer close(gone)
		for {
			var hdr [4]byte
			if _, err := io.ReadFull(br, hdr[:]); err != nil {
				return
			}
			n := binary.BigEndian.Uint32(hdr[:])
			if n > maxCodeBytes {
				return // never read an unbounded request
			}
			p := make([]byte, n)
			if _, err := io.ReadFull(br, p); err != nil {
				return
			}
			select {
			case reqs <- p:
			case <-stop:
				return
			}
		}
	}()
	bw := bufio.NewWriterSize(rawio.Writer(conn), 32<<10)
	for {
		var p []byte
		select {
		case p = <-reqs:
		case <-gone:
			return
		}
		// Each request is use of the sandbox, as an HTTP request is (inUse);
		// an open connection between requests is not.
		s.begin()
		lw := newLineWriter(bw, bw.Flush, conn.SetWriteDeadline)
		var req executeRequest
		if err := json.Unmarshal(p, &req); err != nil {
			lw.write(requestErrorLine(http.StatusBadRequest, badExecuteRequest(err)))
		} else if cc, status, msg := s.executionContext(&req); status != 0 {
			lw.write(requestErrorLine(status, msg))
		} else {
			s.execute(cc, req, lw, gone)
		}
		lw.write(ordered{{"type", "end_of_execution"}})
		broken := lw.isBroken()
		lw.close()
		s.end()
		if broken {
			return
		}
	}
}

// requestErrorLine is the lean connection's form of a refused request
// (what /execute answers with a status and a text body).
func requestErrorLine(status int, msg string) ordered {
	return ordered{{"type", "x_request_error"}, {"status", status}, {"message", msg}}
}
