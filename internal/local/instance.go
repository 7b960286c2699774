// A running sandbox (instance): its record, info, timeout, network and
// release.

package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/client"
	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/egress"
	"github.com/code-sandboxes/code-sandboxes/internal/forward"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// instance is a handle on a local sandbox.
type instance struct {
	rt, id string
	c      *client.Client
	fw     forward.Set
}

func newInstance(rt, id, token string) *instance {
	sock := filepath.Join(rt, dirName(id), socketFile)
	c := client.New(client.Options{EnvdURL: "http://sandbox", HTTPClient: client.UnixHTTPClient(sock), Dial: client.UnixDial(sock), AccessToken: token})
	return &instance{rt: rt, id: id, c: c}
}

func (i *instance) dir() string { return filepath.Join(i.rt, dirName(i.id)) }

func (i *instance) waitHealthy(ctx context.Context, max time.Duration) error {
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
		if _, serr := os.Stat(i.dir()); serr != nil {
			return fmt.Errorf("%w: the sandbox exited during start-up", sberr.ErrUnavailable)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: the sandbox did not answer within %s: %v", sberr.ErrTimeout, max, err)
		case <-time.After(delay):
		}
		if delay < 50*time.Millisecond {
			delay *= 2
		}
	}
}

func (i *instance) ID() string             { return i.id }
func (i *instance) Client() *client.Client { return i.c }

func (i *instance) record() (*record, error) {
	r, err := readRecord(i.dir())
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("sandbox %s: %w (it expired or was killed)", i.id, sberr.ErrNotFound)
		}
		return nil, err
	}
	return r, nil
}

func (i *instance) Info(ctx context.Context) (driver.Info, error) {
	r, err := i.record()
	if err != nil {
		return driver.Info{}, err
	}
	return infoOf(r), nil
}

func infoOf(r *record) driver.Info {
	status := "running"
	switch {
	case r.paused():
		status = StatusPaused
	case !r.alive():
		status = "stopped"
	}
	end := r.EndAt
	if r.Paused {
		end = time.Now().Add(r.Remaining) // the clock is stopped
	}
	return driver.Info{ID: r.ID, Variant: "local", Name: r.Name, Tags: r.Tags, Status: status,
		CreatedAt: r.CreatedAt, EndAt: end, Memory: r.Memory, CPUs: r.CPUs, Network: r.Network,
		Environment: r.Environment, BuildID: r.BuildID, Isolation: r.Isolation}
}

func (i *instance) SetTimeout(ctx context.Context, d time.Duration) error {
	r, err := i.record()
	if err != nil {
		return err
	}
	if _, err := i.c.SetTimeout(ctx, agentTimeout(r, d)); err != nil {
		return err
	}
	r.EndAt = time.Now().Add(d)
	if err := writeRecord(i.dir(), r); err != nil {
		return err
	}
	if r.AutoPause {
		timeoutMoved(r)
	}
	return nil
}

// UpdateNetwork changes the policy of a running sandbox with network all or
// allowlist (its own network namespace cannot be added or removed later):
// the record says what the supervisor applies on SIGUSR1, for connections
// opened from then on.
func (i *instance) UpdateNetwork(ctx context.Context, np driver.NetworkPolicy) error {
	r, err := i.record()
	if err != nil {
		return err
	}
	if err := checkNetwork(np); err != nil {
		return err
	}
	if (r.Network == "none") != (np.Network == "none") {
		return fmt.Errorf("%w: sandbox %s was created with network %s; a running sandbox can switch between all and allowlist only (create a new one)", sberr.ErrNotSupported, r.ID, r.Network)
	}
	if np.Network == "none" {
		return nil
	}
	r.Network, r.AllowedHosts, r.AllowPrivate, r.DeniedHosts = np.Network, np.AllowedHosts, np.AllowPrivate, np.DeniedHosts
	if err := writeRecord(i.dir(), r); err != nil {
		return err
	}
	if !r.alive() {
		return fmt.Errorf("sandbox %s: %w", r.ID, sberr.ErrNotFound)
	}
	if err := syscall.Kill(r.ShimPid, syscall.SIGUSR1); err != nil {
		return err
	}
	// Return once the policy is in force, not merely asked for.
	if err := egress.WaitApplied(ctx, i.dir(), r.policy()); err != nil {
		return fmt.Errorf("%w: sandbox %s: %w", sberr.ErrUnavailable, r.ID, err)
	}
	return nil
}

// checkNetwork validates a network policy for the local variant.
func checkNetwork(np driver.NetworkPolicy) error {
	switch np.Network {
	case "none":
		if len(np.AllowedHosts) > 0 || len(np.DeniedHosts) > 0 || np.AllowPrivate {
			return fmt.Errorf("%w: allowed and denied hosts and private ranges need network all or allowlist", sberr.ErrInvalidConfig)
		}
		return nil
	case "all", "allowlist":
		if _, err := egress.Compile(egress.PolicyOf(np.Network, np.AllowedHosts, np.DeniedHosts, np.AllowPrivate)); err != nil {
			return fmt.Errorf("%w: %w", sberr.ErrInvalidConfig, err)
		}
		return nil
	}
	return fmt.Errorf("%w: unknown network policy %q; use none, all or allowlist", sberr.ErrInvalidConfig, np.Network)
}

// policy is the record's network policy, as its supervisor applies it.
func (r record) policy() egress.Policy {
	return egress.PolicyOf(r.Network, r.AllowedHosts, r.DeniedHosts, r.AllowPrivate)
}

// Host forwards a loopback port of this process to port inside the sandbox,
// through the agent's socket: it works with network "none" too. The forward
// lives as long as this handle (Release or Close end it).
func (i *instance) Host(ctx context.Context, port int) (string, error) {
	return i.fw.Addr(port, i.c.DialPort)
}

func (i *instance) Kill(ctx context.Context) error {
	return killByDir(ctx, i.dir())
}

func (i *instance) Release() error {
	i.fw.Close()
	i.c.CloseIdleConnections()
	return nil
}
