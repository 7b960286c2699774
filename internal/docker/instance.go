package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	mobyclient "github.com/moby/moby/client"

	"github.com/code-sandboxes/code-sandboxes/internal/client"
	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/forward"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// instance is a handle on a docker sandbox.
type instance struct {
	e           *engine
	id          string
	containerID string
	dir         string // the host-side sandbox directory
	c           *client.Client
	fw          forward.Set
}

func newInstance(e *engine, id, containerID, dir, token string, initPid int) *instance {
	sock := filepath.Join(dir, runSubdir, socketFile)
	return &instance{e: e, id: id, containerID: containerID, dir: dir, c: agentClient(sock, token, initPid)}
}

// waitHealthy polls the agent until it answers, the container exits (when
// exited carries a wait on it) or max passes.
func (i *instance) waitHealthy(ctx context.Context, max time.Duration, exited mobyclient.ContainerWaitResult) error {
	ctx, cancel := context.WithTimeout(ctx, max)
	defer cancel()
	delay := 2 * time.Millisecond
	for {
		hctx, hcancel := context.WithTimeout(ctx, 2*time.Second)
		err := i.c.Health(hctx)
		hcancel()
		if err == nil {
			return nil
		}
		// A socket replaced by something else is no transient state.
		var pe *peerError
		if errors.As(err, &pe) {
			return err
		}
		select {
		case r := <-exited.Result:
			msg := ""
			if r.Error != nil {
				msg = ": " + r.Error.Message
			}
			return fmt.Errorf("%w: the sandbox's agent exited during start-up with status %d%s", sberr.ErrUnavailable, r.StatusCode, msg)
		case <-ctx.Done():
			return fmt.Errorf("%w: the sandbox's agent did not answer within %s: %v", sberr.ErrTimeout, max, err)
		case <-time.After(delay):
		}
		if delay < 50*time.Millisecond {
			delay *= 2
		}
	}
}

func (i *instance) ID() string             { return i.id }
func (i *instance) Client() *client.Client { return i.c }

func (i *instance) notFound() error {
	return fmt.Errorf("sandbox %s: %w (it expired or was killed)", i.id, sberr.ErrNotFound)
}

// Info implements driver.Instance, from the container's labels and state and
// the host-side record.
func (i *instance) Info(ctx context.Context) (driver.Info, error) {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	res, err := i.e.c.ContainerInspect(ctx, i.containerID, mobyclient.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return driver.Info{}, i.notFound()
	}
	if err != nil {
		return driver.Info{}, fmt.Errorf("inspecting sandbox %s: %w", i.id, err)
	}
	ct := res.Container
	if ct.Config == nil || ct.State == nil {
		return driver.Info{}, fmt.Errorf("inspecting sandbox %s: the engine's answer lacks config or state", i.id)
	}
	created, _ := time.Parse(time.RFC3339Nano, ct.Created)
	r, _ := readRecord(i.dir)
	return infoOf(ct.Config.Labels, string(ct.State.Status), created, r), nil
}

// UpdateNetwork implements driver.NetworkUpdater (network.go). Info keeps
// reporting the network the sandbox was created with (a label).
func (i *instance) UpdateNetwork(ctx context.Context, np driver.NetworkPolicy) error {
	info, err := i.Info(ctx)
	if err != nil {
		return err
	}
	return updateNetwork(ctx, i.dir, i.id, info.Network, np)
}

// SetTimeout implements driver.Instance: the agent restarts its countdown,
// and the record (which sweeps and Info read; labels can't change) follows.
func (i *instance) SetTimeout(ctx context.Context, d time.Duration) error {
	r, err := readRecord(i.dir)
	if errors.Is(err, os.ErrNotExist) {
		return i.notFound()
	}
	if err != nil {
		return err
	}
	if _, err := i.c.SetTimeout(ctx, d); err != nil {
		return err
	}
	r.EndAt = time.Now().Add(d)
	return writeRecord(i.dir, r)
}

// Host forwards a loopback port of this process to port inside the sandbox
// through the agent's socket: it works with network "none", where nothing
// can be published (and publishing is fixed at creation anyway). The forward
// lives as long as this handle (Release or Close end it).
func (i *instance) Host(ctx context.Context, port int) (string, error) {
	return i.fw.Addr(port, i.c.DialPort)
}

// Kill implements driver.Instance.
func (i *instance) Kill(ctx context.Context) error {
	if err := i.e.removeContainer(ctx, i.containerID); err != nil {
		return err
	}
	return removeSandboxDir(i.dir, i.id)
}

// Release implements driver.Instance.
func (i *instance) Release() error {
	i.fw.Close()
	i.c.CloseIdleConnections() // HTTP's and the lean execution connections
	i.e.Close()
	return nil
}
