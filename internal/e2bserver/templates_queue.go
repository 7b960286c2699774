package e2bserver

import (
	"context"
	"errors"
	"time"
)

// errBuildShutdown is the reason of a build the server's shutdown ended.
var errBuildShutdown = errors.New("cancelled: the server shut down during the build; build again")

// queuedBuild is a triggered build waiting for its turn.
type queuedBuild struct {
	team string
	tp   *template
	b    *tplBuild
	run  func(ctx context.Context)
}

// buildWorker runs the queued builds one at a time (a build takes the
// machine's cores) until the store is closed; builds still queued then
// fail with errBuildShutdown.
func (s *Server) buildWorker() {
	t := s.templates
	defer close(t.workerDone)
	for {
		select {
		case <-t.ctx.Done():
			for {
				select {
				case j := <-t.queue:
					s.finishBuild(j.team, j.tp, j.b, "", "base", errBuildShutdown)
				default:
					return
				}
			}
		case j := <-t.queue:
			if t.ctx.Err() != nil {
				s.finishBuild(j.team, j.tp, j.b, "", "base", errBuildShutdown)
				continue
			}
			j.run(t.ctx)
		}
	}
}

// closeBuilds is the shutdown of template builds: nothing more is queued,
// the running build is cancelled (its processes killed, its jail and work
// dir removed by the environment builder), the queued ones fail, and it
// waits, at most wait, for the queue's goroutine to end.
func (s *Server) closeBuilds(wait time.Duration) error {
	t := s.templates
	t.mu.Lock()
	t.closed = true
	started := t.started
	t.mu.Unlock()
	t.cancel()
	if !started {
		return nil
	}
	select {
	case <-t.workerDone:
		return nil
	case <-time.After(wait):
		return errors.New("e2bserver: a template build did not end within " + wait.String() + " of the shutdown")
	}
}
