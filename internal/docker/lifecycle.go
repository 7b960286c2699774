// Existing sandboxes: connecting to one, listing, killing and sweeping
// them, from their containers' labels and records.

package docker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/api/types/container"
	mobyclient "github.com/moby/moby/client"

	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// Connect implements driver.Variant.
func (v Variant) Connect(ctx context.Context, id string, spec driver.Spec) (driver.Instance, error) {
	eng, err := connect(ctx, spec)
	if err != nil {
		return nil, err
	}
	inst, err := eng.connectTo(ctx, id)
	if err != nil {
		eng.Close()
		return nil, err
	}
	return inst, nil
}

func (e *engine) connectTo(ctx context.Context, id string) (*instance, error) {
	notFound := fmt.Errorf("sandbox %s: %w (it expired or was killed)", id, sberr.ErrNotFound)
	if !idRE.MatchString(id) {
		return nil, notFound
	}
	cs, err := e.ours(ctx, id)
	if err != nil {
		return nil, err
	}
	for _, c := range cs {
		if c.State != container.StateRunning {
			continue
		}
		dir := runDirOf(c.Mounts)
		r, err := readRecord(dir)
		if err != nil {
			return nil, fmt.Errorf("sandbox %s: reading its record in %s: %w", id, dir, err)
		}
		ictx, cancel := context.WithTimeout(ctx, apiTimeout)
		insp, err := e.c.ContainerInspect(ictx, c.ID, mobyclient.ContainerInspectOptions{})
		cancel()
		if err != nil || insp.Container.State == nil || !insp.Container.State.Running {
			return nil, notFound
		}
		inst := newInstance(e, id, c.ID, dir, r.Token, insp.Container.State.Pid)
		if err := inst.waitHealthy(ctx, 5*time.Second, mobyclient.ContainerWaitResult{}); err != nil {
			return nil, err
		}
		return inst, nil
	}
	return nil, notFound
}

// List implements driver.Variant; it also sweeps expired sandboxes and
// debris.
func (v Variant) List(ctx context.Context, spec driver.Spec, f driver.Filter) ([]driver.Info, error) {
	eng, err := connect(ctx, spec)
	if err != nil {
		return nil, err
	}
	defer eng.Close()
	cs, err := eng.ours(ctx, "")
	if err != nil {
		return nil, err
	}
	var out []driver.Info
	alive, _ := eng.sweep(ctx, runtimeDir(), cs, false)
	for _, c := range alive {
		r, _ := readRecord(runDirOf(c.Mounts))
		if i := infoOf(c.Labels, string(c.State), time.Unix(c.Created, 0), r); f.Match(i) {
			out = append(out, i)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}

// Sweep implements driver.Sweeper.
func (v Variant) Sweep(ctx context.Context, spec driver.Spec) (int, error) {
	eng, err := connect(ctx, spec)
	if err != nil {
		return 0, err
	}
	defer eng.Close()
	cs, err := eng.ours(ctx, "")
	if err != nil {
		return 0, err
	}
	_, n := eng.sweep(ctx, runtimeDir(), cs, true)
	return n, nil
}

// Kill implements driver.Variant.
func (v Variant) Kill(ctx context.Context, spec driver.Spec, id string) error {
	eng, err := connect(ctx, spec)
	if err != nil {
		return err
	}
	defer eng.Close()
	notFound := fmt.Errorf("sandbox %s: %w (it expired or was killed)", id, sberr.ErrNotFound)
	if !idRE.MatchString(id) {
		return notFound
	}
	cs, err := eng.ours(ctx, id)
	if err != nil {
		return err
	}
	if len(cs) == 0 {
		_ = removeSandboxDir(filepath.Join(runtimeDir(), id), id)
		return notFound
	}
	for _, c := range cs {
		if err := eng.removeContainer(ctx, c.ID); err != nil {
			return err
		}
		_ = removeSandboxDir(runDirOf(c.Mounts), id)
	}
	return nil
}

// endOf is when a sandbox ends: the record's end (SetTimeout moves it) when
// there is a record, else the label's.
func endOf(labels map[string]string, r *record) time.Time {
	if r != nil && !r.EndAt.IsZero() {
		return r.EndAt
	}
	t, _ := time.Parse(time.RFC3339, labels[labelEndAt])
	return t
}

func infoOf(labels map[string]string, state string, created time.Time, r *record) driver.Info {
	status := "running"
	if state != string(container.StateRunning) {
		status = "stopped"
	}
	if t, err := time.Parse(time.RFC3339Nano, labels[labelCreatedAt]); err == nil {
		created = t
	}
	var tags map[string]string
	for k, v := range labels {
		if tk, ok := strings.CutPrefix(k, labelTagPrefix); ok {
			if tags == nil {
				tags = map[string]string{}
			}
			tags[tk] = v
		}
	}
	mem, _ := strconv.ParseInt(labels[labelMemory], 10, 64)
	cpus, _ := strconv.ParseFloat(labels[labelCPUs], 64)
	return driver.Info{ID: labels[labelID], Variant: "docker", Name: labels[labelName], Tags: tags, Status: status,
		CreatedAt: created, EndAt: endOf(labels, r), Memory: mem, CPUs: cpus, Network: labels[labelNetwork],
		Environment: labels[labelEnv], BuildID: labels[labelEnvBuild], Isolation: labels[labelIsolation]}
}

// sweep removes containers past their end (plus grace) or no longer
// running, and sandbox directories in rt whose container is gone; it
// returns the running, unexpired containers. With remove false it only
// sorts (List: a read has no side effects); n counts the dead removed. The agents end themselves at
// their lifetime; this is the backstop for a wedged agent, an engine that
// missed an AutoRemove, or a host that crashed.
func (e *engine) sweep(ctx context.Context, rt string, cs []container.Summary, remove bool) (alive []container.Summary, n int) {
	now := time.Now()
	known := map[string]bool{}
	for _, c := range cs {
		id := c.Labels[labelID]
		known[id] = true
		dir := runDirOf(c.Mounts)
		r, _ := readRecord(dir)
		end := endOf(c.Labels, r)
		young := now.Sub(time.Unix(c.Created, 0)) < createGrace
		switch {
		case c.State == container.StateRunning && (end.IsZero() || now.Before(end.Add(sweepGrace))):
			alive = append(alive, c)
		case c.State == container.StateRemoving, c.State == container.StateCreated && young:
			// Going away on its own, or being created right now.
		default:
			if !remove {
				continue
			}
			if err := e.removeContainer(ctx, c.ID); err == nil {
				_ = removeSandboxDir(dir, id)
				n++
			}
		}
	}
	if !remove {
		return alive, 0
	}
	ents, _ := os.ReadDir(rt)
	for _, ent := range ents {
		id := ent.Name()
		if !ent.IsDir() || !idRE.MatchString(id) || known[id] {
			continue
		}
		dir := filepath.Join(rt, id)
		r, err := readRecord(dir)
		if err == nil && r.Engine != e.host {
			continue // a sandbox on another engine: not ours to judge
		}
		// No container: debris once its end has passed, or once it is too
		// old to be a Create in progress.
		ended := err == nil && !r.EndAt.IsZero() && now.After(r.EndAt)
		if st, err := os.Stat(dir); err == nil && (ended || now.Sub(st.ModTime()) > createGrace) {
			_ = removeSandboxDir(dir, id)
			n++
		}
	}
	return alive, n
}
