package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	mobyclient "github.com/moby/moby/client"

	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/environment"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// engine is a connection to a Docker engine.
type engine struct {
	c    *mobyclient.Client
	host string // for messages
}

// pingTimeout bounds how long an unreachable engine can hold up a call.
const pingTimeout = 10 * time.Second

// connect opens and checks a connection to the engine spec's Options name
// (Host, else $DOCKER_HOST, else the local socket).
func connect(ctx context.Context, ds driver.Spec) (*engine, error) {
	spec, err := optionsOf(ds)
	if err != nil {
		return nil, err
	}
	opts := []mobyclient.Opt{mobyclient.FromEnv}
	host := os.Getenv("DOCKER_HOST")
	if spec.Host != "" {
		opts = append(opts, mobyclient.WithHost(spec.Host))
		host = spec.Host
	}
	if host == "" {
		host = mobyclient.DefaultDockerHost
	}
	if !localEngine(host) {
		return nil, fmt.Errorf("%w: the Docker engine at %s is on another machine, but the docker variant bind-mounts the agent and the socket directory from this one: use a local engine (unix socket or loopback)", sberr.ErrInvalidConfig, host)
	}
	c, err := mobyclient.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: Docker engine address %q: %w", sberr.ErrInvalidConfig, host, err)
	}
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	if _, err := c.Ping(pctx, mobyclient.PingOptions{NegotiateAPIVersion: true}); err != nil {
		c.Close()
		return nil, fmt.Errorf("%w: the Docker engine at %s is not reachable (start dockerd or set DOCKER_HOST / docker.Options.Host): %w", sberr.ErrUnavailable, host, err)
	}
	return &engine{c: c, host: host}, nil
}

// localEngine reports whether host addresses an engine on this machine.
func localEngine(host string) bool {
	u, err := url.Parse(host)
	if err != nil {
		return false
	}
	switch u.Scheme {
	case "unix", "npipe":
		return true
	case "tcp", "http", "https":
		h := u.Hostname()
		if h == "localhost" {
			return true
		}
		ip := net.ParseIP(h)
		return ip != nil && ip.IsLoopback()
	}
	return false // ssh:// and the like reach another machine
}

func (e *engine) Close() { _ = e.c.Close() }

// imageRef is the tag of an environment build's image: the build id pins
// the content, so an existing tag never needs re-importing.
func imageRef(buildID string) string { return "code-sandboxes-env:" + buildID }

// ensureImage imports the build's rootfs as an image unless the engine has
// it. Concurrent creators serialise on a lock file so a big rootfs is
// streamed once.
func (e *engine) ensureImage(ctx context.Context, rt string, b *environment.Build, progress io.Writer) (string, error) {
	ref := imageRef(b.ID)
	if _, err := e.c.ImageInspect(ctx, ref); err == nil {
		return ref, nil
	} else if !cerrdefs.IsNotFound(err) {
		return "", fmt.Errorf("inspecting image %s on the Docker engine: %w", ref, err)
	}
	unlock, err := lockFile(ctx, filepath.Join(rt, ".import-"+b.ID[:12]+".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := e.c.ImageInspect(ctx, ref); err == nil {
		return ref, nil // another process imported it while we waited
	}
	start := time.Now()
	fmt.Fprintf(progress, "environment %s: importing build %s into the Docker engine (first use on this engine only)\n", b.Name, b.ShortID())
	pr, pw := io.Pipe()
	tarErr := make(chan error, 1)
	go func() {
		err := environment.WriteTar(ctx, b.Rootfs(), pw)
		pw.CloseWithError(err)
		tarErr <- err
	}()
	res, err := e.c.ImageImport(ctx, mobyclient.ImageImportSource{Source: pr, SourceName: "-"}, ref,
		mobyclient.ImageImportOptions{Changes: []string{
			"LABEL " + labelCreatedBy + "=" + createdBy,
			"LABEL " + labelEnvBuild + "=" + b.ID,
		}})
	if err != nil {
		pr.CloseWithError(err)
		<-tarErr
		return "", fmt.Errorf("importing environment %s (build %s) into the Docker engine: %w", b.Name, b.ShortID(), err)
	}
	msgErr := readImportStream(res)
	res.Close()
	// The engine may answer before reading the whole body: stop the writer.
	pr.CloseWithError(errors.New("import finished"))
	werr := <-tarErr
	if msgErr != nil {
		return "", fmt.Errorf("importing environment %s (build %s) into the Docker engine: %w", b.Name, b.ShortID(), msgErr)
	}
	if _, err := e.c.ImageInspect(ctx, ref); err != nil {
		if werr != nil {
			err = fmt.Errorf("writing the rootfs as a tar stream: %w", werr)
		}
		return "", fmt.Errorf("importing environment %s (build %s) into the Docker engine: the image is missing afterwards: %w", b.Name, b.ShortID(), err)
	}
	fmt.Fprintf(progress, "environment %s: imported in %s\n", b.Name, time.Since(start).Round(100*time.Millisecond))
	return ref, nil
}

// readImportStream reads the engine's JSON progress messages (bounded) and
// returns the error one of them reports.
func readImportStream(r io.Reader) error {
	dec := json.NewDecoder(io.LimitReader(r, 16<<20))
	for {
		var m struct {
			Error       string `json:"error"`
			ErrorDetail *struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("reading the engine's answer: %w", err)
		}
		if m.ErrorDetail != nil && m.ErrorDetail.Message != "" {
			return errors.New(m.ErrorDetail.Message)
		}
		if m.Error != "" {
			return errors.New(m.Error)
		}
	}
}

// lockFile takes an exclusive flock on path, waiting while ctx allows; the
// kernel drops it if we die.
func lockFile(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for another process's image import: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// ours lists the containers this package created (all states), optionally
// only the one with sandbox id id.
func (e *engine) ours(ctx context.Context, id string) ([]container.Summary, error) {
	f := mobyclient.Filters{}.Add("label", labelCreatedBy+"="+createdBy)
	if id != "" {
		f.Add("label", labelID+"="+id)
	}
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	res, err := e.c.ContainerList(ctx, mobyclient.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return nil, fmt.Errorf("listing containers on the Docker engine: %w", err)
	}
	var out []container.Summary
	for _, c := range res.Items {
		if idRE.MatchString(c.Labels[labelID]) {
			out = append(out, c)
		}
	}
	return out, nil
}

// removeContainer force-removes a container (SIGKILL first) and waits until
// the engine no longer knows it. AutoRemove may be removing it already,
// which the engine answers with a conflict.
func (e *engine) removeContainer(ctx context.Context, containerID string) error {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	_, err := e.c.ContainerRemove(ctx, containerID, mobyclient.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err == nil || cerrdefs.IsNotFound(err) {
		return nil
	}
	if !cerrdefs.IsConflict(err) {
		return fmt.Errorf("removing container %s: %w", shortID(containerID), err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := e.c.ContainerInspect(ctx, containerID, mobyclient.ContainerInspectOptions{}); cerrdefs.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("%w: container %s is still being removed after 20s", sberr.ErrTimeout, shortID(containerID))
}

// runDirOf finds a container's host run directory through its mounts, so
// that a sandbox created by any process (with any runtime dir) can be
// reached; "" when it has none.
func runDirOf(mounts []container.MountPoint) string {
	for _, m := range mounts {
		if m.Destination == runInContainer && filepath.Base(m.Source) == runSubdir {
			return filepath.Dir(m.Source)
		}
	}
	return ""
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// logTail keeps the last max bytes written to it: a container's output
// while it starts, to explain a failed start.
type logTail struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (t *logTail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

func (t *logTail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}
