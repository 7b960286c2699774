package e2bserver

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Uploaded archives (a COPY step's files, by the hash the SDK named them
// with) are a cache: the SDK asks before every build whether each is
// present and uploads it again when not. So the server may drop them, and
// does: with their template (when no other template of the team uses
// them), and when unused for uploadTTL. A team's archives together are
// bounded by the server's upload quota.
//
// The name can't be checked against the content: the SDK's filesHash is a
// hash of "COPY src dest" and of each file's path, mode, size and content
// as it stats them (directories' sizes included, which depend on the
// client's filesystem), not of the archive it uploads.
const (
	// uploadTTL: an archive not uploaded or used by a build for this long
	// is removed. A day keeps a working day's rebuilds from uploading
	// again, and bounds how long a team's abandoned files hold the disk.
	uploadTTL = 24 * time.Hour
	// defaultUploadQuota is a team's bytes of stored archives unless the
	// operator says otherwise (serve --template-upload-quota): eight
	// uploads of the largest size.
	defaultUploadQuota = 2 << 30
	sweepEvery         = 10 * time.Minute
)

// teamUploadBytes is the size of the team's stored archives, with the
// uploads in progress counted at what they reserved (t.mu held).
func (t *templateStore) teamUploadBytes(team string) int64 {
	var n int64
	ents, _ := os.ReadDir(filepath.Join(t.teamDir(team), "files"))
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".tar") {
			continue // an upload in progress: counted by its reservation
		}
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
	}
	return n + t.reserved[team]
}

// reserveUpload sets aside up to want bytes of the team's quota for an
// upload (less when less is left); it returns the bytes reserved, 0 when
// the quota is used up, and the release.
func (t *templateStore) reserveUpload(team string, want int64) (int64, func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	left := t.uploadQuota - t.teamUploadBytes(team)
	n := min(want, left)
	if n <= 0 {
		return 0, func() {}
	}
	if t.reserved == nil {
		t.reserved = map[string]int64{}
	}
	t.reserved[team] += n
	return n, func() {
		t.mu.Lock()
		t.reserved[team] -= n
		if t.reserved[team] <= 0 {
			delete(t.reserved, team)
		}
		t.mu.Unlock()
	}
}

func (t *templateStore) quotaError(team string, size int64) string {
	t.mu.Lock()
	used := t.teamUploadBytes(team)
	t.mu.Unlock()
	what := "this upload"
	if size >= 0 {
		what = fmt.Sprintf("this upload's %d bytes", size)
	}
	return fmt.Sprintf("the team's uploaded template files take %d bytes and %s would pass the limit of %d bytes per team (serve --template-upload-quota): "+
		"delete templates you no longer need (their files go with them), or build again after %s, when files no build used are removed", used, what, t.uploadQuota, uploadTTL)
}

// releaseUploads removes the archives of a deleted template (already out
// of its team's list; t.mu held) that no other template of the team uses.
func (t *templateStore) releaseUploads(team string, tp *template) int {
	used := map[string]bool{}
	for _, o := range t.load(team) {
		for _, b := range o.Builds {
			for _, h := range b.Files {
				used[h] = true
			}
		}
	}
	n := 0
	for _, b := range tp.Builds {
		for _, h := range b.Files {
			if !used[h] && filesHashRE.MatchString(h) {
				if os.Remove(t.uploadPath(team, h)) == nil {
					n++
				}
				used[h] = true // once
			}
		}
	}
	return n
}

// sweepUploads removes every team's archives unused since before
// now-uploadTTL (an upload or a build's use touches them), and upload
// temporaries a crash left, but never one a build in progress named.
func (t *templateStore) sweepUploads(now time.Time) (removed int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sweptAt = now
	busy := map[string]bool{}
	for team, l := range t.teams {
		for _, tp := range l {
			for _, b := range tp.Builds {
				if b.Status == "waiting" || b.Status == "building" {
					for _, h := range b.Files {
						busy[t.uploadPath(team, h)] = true
					}
				}
			}
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(t.dir, "*", "files"))
	for _, d := range dirs {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			p := filepath.Join(d, e.Name())
			fi, err := e.Info()
			if err != nil || busy[p] || !fi.ModTime().Before(now.Add(-uploadTTL)) {
				continue
			}
			// In-progress temporaries are written to now, so an old one
			// is a crash's leftover.
			if os.Remove(p) == nil {
				removed++
			}
		}
	}
	return removed
}

// maybeSweep sweeps when the last sweep is sweepEvery old.
func (t *templateStore) maybeSweep() {
	t.mu.Lock()
	due := time.Since(t.sweptAt) > sweepEvery
	t.mu.Unlock()
	if due {
		t.sweepUploads(time.Now())
	}
}
