package local

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/driver"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// fakeSnapshot keeps a snapshot named name of a checkpoint made of random
// bytes (no runsc needed: what is checked is what a fork reads before it
// hands the checkpoint to runsc restore). The state directory is the
// test's own.
func fakeSnapshot(t *testing.T, name string) string {
	t.Helper()
	ckpt := filepath.Join(t.TempDir(), "ckpt")
	if err := os.Mkdir(ckpt, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"checkpoint.img", "pages_meta.img", "pages.img"} {
		b := make([]byte, 64<<10)
		_, _ = rand.Read(b)
		// Readable by others, as a checkpoint's files may be.
		if err := os.WriteFile(filepath.Join(ckpt, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sdir, err := snapshotDir(name)
	if err != nil {
		t.Fatal(err)
	}
	meta := snapshotMeta{Name: name, CreatedAt: time.Now(), From: "lsomeone",
		Spec: shimSpec{Record: record{Network: "none", Isolation: IsolationGVisor, Memory: 256 << 20}}}
	meta.Spec.Agent.Env = map[string]string{"API_KEY": "snapshot-env-secret"}
	if err := writeSnapshot(name, sdir, ckpt, meta); err != nil {
		t.Fatalf("writeSnapshot: %v", err)
	}
	return sdir
}

// forkErr is what a fork of snapshot name answers; the sandbox binary
// and runsc are looked up only after the snapshot was checked, so on a
// machine without them an intact snapshot gets as far as that.
func forkErr(t *testing.T, name string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	inst, err := Variant{}.fork(ctx, driver.Spec{Snapshot: name, Lifetime: time.Minute}, t.TempDir(), "")
	if err == nil {
		_ = inst.Kill(context.Background())
		t.Fatalf("fork of the fake snapshot %s started a sandbox", name)
	}
	return err
}

func tamperedErr(err error) bool {
	return err != nil && errors.Is(err, sberr.ErrInvalidConfig) && strings.Contains(err.Error(), "integrity")
}

// A snapshot is handed to runsc restore, as root, only as it was kept:
// bytes flipped in its checkpoint, files added, removed or swapped for a
// symlink, its snapshot.json edited (the spec a fork runs with: its
// network, memory, environment), or a snapshot moved under another name
// (another team's, on serve, whose names are the team's prefix) are all
// refused before the restore, with what to do.
func TestSnapshotTamperedRefused(t *testing.T) {
	t.Setenv(stateDirEnv, filepath.Join(t.TempDir(), "state"))
	flip := func(p string) func(t *testing.T, sdir string) {
		return func(t *testing.T, sdir string) {
			f := filepath.Join(sdir, p)
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/2] ^= 0x01
			if err := os.WriteFile(f, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	cases := []struct {
		name   string
		tamper func(t *testing.T, sdir string)
	}{
		{"flipped-checkpoint-byte", flip("checkpoint/pages.img")},
		{"flipped-checkpoint-img", flip("checkpoint/checkpoint.img")},
		{"truncated", func(t *testing.T, sdir string) {
			if err := os.Truncate(filepath.Join(sdir, "checkpoint", "pages.img"), 100); err != nil {
				t.Fatal(err)
			}
		}},
		{"extra-file", func(t *testing.T, sdir string) {
			if err := os.WriteFile(filepath.Join(sdir, "checkpoint", "extra.img"), []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"removed-file", func(t *testing.T, sdir string) {
			if err := os.Remove(filepath.Join(sdir, "checkpoint", "pages_meta.img")); err != nil {
				t.Fatal(err)
			}
		}},
		{"symlinked-file", func(t *testing.T, sdir string) {
			f := filepath.Join(sdir, "checkpoint", "pages.img")
			other := filepath.Join(t.TempDir(), "pages.img")
			b, _ := os.ReadFile(f)
			if err := os.WriteFile(other, b, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(f); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(other, f); err != nil {
				t.Fatal(err)
			}
		}},
		{"no-seal", func(t *testing.T, sdir string) {
			if err := os.Remove(filepath.Join(sdir, snapshotSealFile)); err != nil {
				t.Fatal(err)
			}
		}},
		{"edited-snapshot-json", func(t *testing.T, sdir string) {
			f := filepath.Join(sdir, snapshotMetaFile)
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var m snapshotMeta
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			m.Spec.Record.Network = "all"
			m.Spec.Record.Memory = 64 << 30
			m.Spec.Rootfs = "/"
			b, _ = json.Marshal(m)
			if err := os.WriteFile(f, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			name := "t-" + c.name
			sdir := fakeSnapshot(t, name)
			c.tamper(t, sdir)
			if err := forkErr(t, name); !tamperedErr(err) {
				t.Fatalf("fork of a snapshot with %s: %v; want it refused (ErrInvalidConfig, integrity) before the restore", c.name, err)
			} else {
				t.Logf("refused: %v", err)
			}
		})
	}
	// Another's snapshot moved under a name of ours: its bytes are intact,
	// but it was not kept under that name.
	t.Run("another-teams-snapshot", func(t *testing.T) {
		theirs := fakeSnapshot(t, "e2b-0123456789-theirs")
		ours, err := snapshotDir("e2b-abcdefabcd-mine")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(theirs, ours); err != nil {
			t.Fatal(err)
		}
		if err := forkErr(t, "e2b-abcdefabcd-mine"); !tamperedErr(err) {
			t.Fatalf("fork of another's snapshot moved under our name: %v; want it refused", err)
		}
	})
	// An intact snapshot passes the check, and the fork runs with the
	// spec it was kept with.
	t.Run("intact", func(t *testing.T) {
		sdir := fakeSnapshot(t, "t-intact")
		b, err := readSealedSnapshot("t-intact", sdir)
		var m snapshotMeta
		if err != nil || json.Unmarshal(b, &m) != nil || m.Spec.Agent.Env["API_KEY"] != "snapshot-env-secret" {
			t.Fatalf("an intact snapshot: %v (%s)", err, b)
		}
	})
	// The key is the host's: with another key (the snapshot copied from
	// another host, or a seal forged without the key) it is refused.
	t.Run("other-key", func(t *testing.T) {
		fakeSnapshot(t, "t-other-key")
		k := make([]byte, snapshotKeyLen)
		_, _ = rand.Read(k)
		if err := os.WriteFile(snapshotKeyPath(), k, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := forkErr(t, "t-other-key"); !tamperedErr(err) {
			t.Fatalf("fork of a snapshot sealed under another key: %v; want it refused", err)
		}
	})
}

// The bytes of a snapshot's checkpoint are the sandbox's memory: hard
// links of the paused sandbox's files, which runsc wrote. They and its
// snapshot.json (the environment given at create) are root's alone.
func TestSnapshotFilesPrivate(t *testing.T) {
	// Under directories anyone may enter, so that what keeps a sandbox's
	// user out is the state directory's own modes.
	base := t.TempDir()
	for _, d := range []string{base, filepath.Dir(base)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv(stateDirEnv, filepath.Join(base, "state"))
	sdir := fakeSnapshot(t, "t-private")
	b, err := os.ReadFile(filepath.Join(sdir, snapshotMetaFile))
	if err != nil || !bytes.Contains(b, []byte("snapshot-env-secret")) {
		t.Fatalf("the fake snapshot's meta does not hold its environment (the check proves nothing): %v", err)
	}
	var files []string
	_ = filepath.Walk(filepath.Dir(filepath.Dir(sdir)), func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			t.Errorf("%s: %v", p, err)
			return nil
		}
		if fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s has mode %v: group or others have access", p, fi.Mode().Perm())
		}
		files = append(files, p)
		return nil
	})
	if len(files) < 7 {
		t.Fatalf("found %d entries of the state directory: %v", len(files), files)
	}
	if os.Geteuid() != 0 {
		t.Logf("not root: modes checked, not read as the sandbox's user")
		return
	}
	// As a sandbox's user (the local variant's first host uid), every
	// file and directory of it: refused.
	for _, p := range files {
		cmd := exec.Command("/bin/cat", p)
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			cmd = exec.Command("/bin/ls", p)
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 0x70000000, Gid: 0x70000000}}
		if out, err := cmd.CombinedOutput(); err == nil || !bytes.Contains(out, []byte("ermission denied")) {
			t.Errorf("%s as a sandbox's host uid: %v %q, want permission denied", p, err, out)
		}
	}
}

// TestSnapshotKeyConcurrentCreate: snapshots taken at once on a fresh
// machine agree on one key; none sees a key half written or reports it
// missing.
func TestSnapshotKeyConcurrentCreate(t *testing.T) {
	for round := 0; round < 20; round++ {
		t.Setenv(stateDirEnv, filepath.Join(t.TempDir(), "state"))
		const n = 8
		keys := make([][]byte, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				keys[i], errs[i] = snapshotKey(true)
			}()
		}
		wg.Wait()
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("round %d, snapshot %d: %v", round, i, errs[i])
			}
			if !bytes.Equal(keys[i], keys[0]) {
				t.Fatalf("round %d: snapshots %d and 0 got different keys", round, i)
			}
		}
		ents, err := os.ReadDir(filepath.Dir(snapshotKeyPath()))
		if err != nil || len(ents) != 1 {
			t.Fatalf("round %d: the key dir holds %v (%v), want the key alone", round, ents, err)
		}
	}
}
