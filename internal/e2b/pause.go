package e2b

// Pause, resume and snapshots on E2B (spec/openapi.yml; the JS SDK's
// SandboxApi.pause, connectSandbox and createSnapshot):
//   - pause is POST /sandboxes/{id}/pause {"memory": true} (204; 409 means
//     it is paused already, which the SDK answers as "not paused now" and we
//     as done);
//   - resume is POST /sandboxes/{id}/connect {"timeout": s} (201 resumed,
//     200 it was running), as the SDK's connect; /resume is deprecated;
//   - a snapshot is POST /sandboxes/{id}/snapshots {"name"} (201
//     SnapshotInfo): a template, so a sandbox created with that name as its
//     template (Spec.Snapshot) is a fork.

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

var (
	_ driver.Pauser      = (*instance)(nil)
	_ driver.Snapshotter = (*instance)(nil)
)

// defaultResumeTimeout is the SDKs' DEFAULT_SANDBOX_TIMEOUT_MS: the
// lifetime a resumed sandbox gets when we don't know what it had left.
const defaultResumeTimeout = 5 * time.Minute

// snapshotNamePattern: E2B's template names (alias, optionally namespaced
// "team/alias" and tagged "alias:tag"); bounded, as it goes into a path.
var snapshotNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}(/[A-Za-z0-9][A-Za-z0-9._-]{0,127})?(:[A-Za-z0-9][A-Za-z0-9._-]{0,127})?$`)

func checkSnapshotName(name string) error {
	if !snapshotNamePattern.MatchString(name) {
		return fmt.Errorf("snapshot %q: %w: an E2B snapshot name is a template name: letters, digits, '.', '-' and '_' (optionally team/name and name:tag)", name, sberr.ErrInvalidInput)
	}
	return nil
}

func (i *instance) refuseDebug(op string) error {
	if i.c.debug {
		return fmt.Errorf("%s: %w: E2B debug mode has no control plane (unset e2b.Options.Debug / E2B_DEBUG)", op, sberr.ErrNotSupported)
	}
	return nil
}

// Pause is POST /sandboxes/{id}/pause with the memory kept. What the
// sandbox had left of its lifetime is remembered for Resume (the lifetime
// clock stops while paused, as on the local variant). If ctx ends during
// the call, E2B may still pause the sandbox: Info says which.
func (i *instance) Pause(ctx context.Context) error {
	if err := i.refuseDebug("pause sandbox " + i.id); err != nil {
		return err
	}
	info, err := getInfo(ctx, i.c, i.id)
	if err != nil {
		return fmt.Errorf("pause: %w", err)
	}
	if info.Status == "paused" {
		return nil
	}
	left := time.Until(info.EndAt)
	_, err = i.api().call(ctx, "pause sandbox", http.MethodPost, "/sandboxes/"+url.PathEscape(i.id)+"/pause", i.id,
		map[string]bool{"memory": true}, nil)
	if ae := asAPIError(err); ae != nil && ae.Status == http.StatusConflict {
		// As the SDK: 409 is "already paused" (by another client).
		err = nil
	}
	if err != nil {
		return err
	}
	i.mu.Lock()
	i.left = left
	i.mu.Unlock()
	_ = i.Release() // our connections end with the sandbox's processes
	return nil
}

// Resume is POST /sandboxes/{id}/connect, which resumes a paused sandbox
// (and only extends a running one's life), with the lifetime it had left
// at Pause (the SDKs' 5 minutes when this handle did not pause it).
func (i *instance) Resume(ctx context.Context) error {
	if err := i.refuseDebug("resume sandbox " + i.id); err != nil {
		return err
	}
	i.mu.Lock()
	left := i.left
	i.mu.Unlock()
	if left <= 0 {
		left = defaultResumeTimeout
	}
	var sb sandboxJSON
	if _, err := i.api().call(ctx, "resume sandbox", http.MethodPost, "/sandboxes/"+url.PathEscape(i.id)+"/connect", i.id,
		map[string]int64{"timeout": seconds(left)}, &sb); err != nil {
		return err
	}
	if sb.SandboxID != "" && sb.SandboxID != i.id {
		// A buggy or hostile host: our handle must not start talking to
		// another sandbox under this one's name.
		return fmt.Errorf("resume sandbox %s: %w: the E2B API answered for another sandbox (%.128q)", i.id, sberr.ErrUnavailable, sb.SandboxID)
	}
	i.mu.Lock()
	i.left = 0
	i.mu.Unlock()
	return nil
}

// snapshotInfo is E2B's SnapshotInfo.
type snapshotInfo struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

// Snapshot is POST /sandboxes/{id}/snapshots {"name"}: E2B pauses the
// sandbox while it takes the snapshot, which lives on as a template named
// name; Create with Spec.Snapshot = name forks it.
func (i *instance) Snapshot(ctx context.Context, name string) error {
	if err := checkSnapshotName(name); err != nil {
		return err
	}
	if err := i.refuseDebug("snapshot sandbox " + i.id); err != nil {
		return err
	}
	var si snapshotInfo
	if _, err := i.api().call(ctx, "snapshot sandbox", http.MethodPost, "/sandboxes/"+url.PathEscape(i.id)+"/snapshots", i.id,
		map[string]string{"name": name}, &si); err != nil {
		if ae := asAPIError(err); ae != nil && ae.Status == http.StatusBadRequest {
			ae.hint = fmt.Sprintf("E2B refused the snapshot name %q with the reason above", name)
		}
		return err
	}
	if si.SnapshotID == "" {
		return fmt.Errorf("snapshot sandbox %s: %w: the E2B API's answer has no snapshotID", i.id, sberr.ErrUnavailable)
	}
	return nil
}
