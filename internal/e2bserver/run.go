package e2bserver

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"
)

// Run serves on ln until ctx ends, then shuts down: it stops accepting,
// gives open requests a grace period (executions and process streams can be
// long, so they are cut after it), and kills the sandboxes it created unless
// keep is set.
func (s *Server) Run(ctx context.Context, ln net.Listener, keep bool) error {
	hs := &http.Server{
		Handler: s.front,
		// No read or write timeouts: NDJSON executions, Connect streams and
		// uploads legitimately last long; the header timeout stops slowloris.
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	// Sandboxes an earlier server left running (--keep-sandboxes) belong
	// to their teams again; a failure only leaves some unreachable.
	if err := s.Adopt(ctx); err != nil {
		s.log.Error("adopting running sandboxes", "error", err)
	}
	// Forget sandboxes that ended by their timeout, so that they stop
	// counting against their team's quota and the server's memory.
	jctx, stopJanitor := context.WithCancel(ctx)
	defer stopJanitor()
	go func() {
		t := time.NewTicker(30 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-jctx.Done():
				return
			case <-t.C:
				lctx, cancel := context.WithTimeout(jctx, 20*time.Second)
				_, _ = s.ours(lctx, "")
				cancel()
			}
		}
	}()
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	var err error
	select {
	case err = <-errc:
	case <-ctx.Done():
		s.beginClosing()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if hs.Shutdown(sctx) != nil {
			_ = hs.Close()
		}
		cancel()
		<-errc
	}
	// A create still running after the grace period is cut now, and every
	// create has ended (its sandbox committed, or removed) before the kill
	// below, so none is left running unheld.
	s.beginClosing()
	s.stopCreates()
	s.creates.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	// Template builds end with the server (their steps killed, their
	// work dirs gone); the environment builder's own kill grace is 10 s.
	err = errors.Join(err, s.closeBuilds(time.Minute))
	if !keep {
		kctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err = errors.Join(err, s.KillCreated(kctx))
	}
	return err
}

// beginClosing refuses new creates and commits from now on.
func (s *Server) beginClosing() {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
}

// StartLoopback serves s on a fresh 127.0.0.1 port in the background, for
// tests, benchmarks and embedding. It returns the base URL (the value for
// both E2B_API_URL and E2B_SANDBOX_URL) and stop, which shuts the server down
// like Run with keep and waits for it, at most 90 s.
func (s *Server) StartLoopback(keep bool) (url string, stop func() error, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, ln, keep) }()
	stop = func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(90 * time.Second):
			return errors.New("e2bserver: the server did not shut down within 90s")
		}
	}
	return "http://" + ln.Addr().String(), stop, nil
}
