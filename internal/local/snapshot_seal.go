package local

// A snapshot's seal: an HMAC-SHA256, under a key of the host's kept apart
// from the snapshots (root's alone, 0600 in a 0700 directory of the state
// directory), over the snapshot's name, its snapshot.json and every file
// of its checkpoint. A fork checks it before anything of the snapshot is
// used: runsc restores a checkpoint as root, and snapshot.json is the
// spec the fork runs with (its root filesystem, network, limits,
// environment), so a snapshot changed after it was kept (bytes flipped,
// files added or swapped for a symlink, its spec edited) or moved under
// another name (another team's, on serve, whose names carry the team's
// prefix) is refused, never restored.

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

const (
	// snapshotSealFile holds the seal (hex) in the snapshot's directory.
	snapshotSealFile = "snapshot.seal"
	// snapshotKeyFile is the sealing key, under the state directory's
	// keysDir.
	snapshotKeyFile = "snapshot-seal.key"
	keysDir         = "keys"
	snapshotKeyLen  = 32
	// maxSnapshotMeta bounds the snapshot.json a fork reads.
	maxSnapshotMeta = 1 << 20
	// maxCheckpointFiles bounds the files of a checkpoint (runsc writes
	// a handful).
	maxCheckpointFiles = 64
)

// errSnapshotIntegrity is how a snapshot that fails its check is refused.
var errSnapshotIntegrity = fmt.Errorf("%w: snapshot integrity", sberr.ErrInvalidConfig)

func snapshotKeyPath() string { return filepath.Join(stateDir(), keysDir, snapshotKeyFile) }

// snapshotKey reads the sealing key; with create, it makes one if there
// is none. The key must be a regular file of ours that no one else may
// read or write (not a symlink), or it is refused with what to do.
func snapshotKey(create bool) ([]byte, error) {
	p := snapshotKeyPath()
	if err := ensureStateDir(filepath.Dir(p)); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, os.ErrNotExist) && create {
		key := make([]byte, snapshotKeyLen)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
		// Written whole under a name of its own, then linked into place:
		// a concurrent snapshot sees either no key or all of it.
		werr := publishKey(p, key)
		if werr == nil {
			return key, nil
		}
		if !errors.Is(werr, os.ErrExist) {
			return nil, fmt.Errorf("snapshot key %s: %w", p, werr)
		}
		// Made by a concurrent snapshot: use that one.
		f, err = os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	}
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: the key snapshots are sealed with (%s) is missing, so no snapshot can be checked: take the snapshot again", errSnapshotIntegrity, p)
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot key %s: %w (a symlink is refused)", p, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o077 != 0 || !ok || int(sys.Uid) != os.Geteuid() || st.Size() != snapshotKeyLen {
		return nil, fmt.Errorf("%w: the snapshot key %s is not a %d-byte regular file of uid %d that only it may read (mode %v): remove it and take the snapshots again", errSnapshotIntegrity, p, snapshotKeyLen, os.Geteuid(), st.Mode())
	}
	key := make([]byte, snapshotKeyLen)
	if _, err := io.ReadFull(f, key); err != nil {
		return nil, fmt.Errorf("snapshot key %s: %w", p, err)
	}
	return key, nil
}

// publishKey writes key to a temporary file beside p and links it to p,
// failing with os.ErrExist when p is there already.
func publishKey(p string, key []byte) error {
	w, err := os.CreateTemp(filepath.Dir(p), ".snapshot-seal-*.key")
	if err != nil {
		return err
	}
	tmp := w.Name()
	defer os.Remove(tmp)
	_, err = w.Write(key)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Link(tmp, p)
}

// snapshotMAC is the seal of the snapshot name with snapshot.json meta and
// the checkpoint in ckpt: every entry must be a regular file (not a
// symlink, not a directory), each read whole, its length bound in.
func snapshotMAC(key []byte, name string, meta []byte, ckpt string) ([]byte, error) {
	m := hmac.New(sha256.New, key)
	field := func(h hash.Hash, b []byte) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	field(m, []byte("code-sandboxes snapshot seal v1"))
	field(m, []byte(name))
	field(m, meta)
	ents, err := os.ReadDir(ckpt) // sorted by name
	if err != nil {
		return nil, err
	}
	if len(ents) > maxCheckpointFiles {
		return nil, fmt.Errorf("%d files in the checkpoint, more than %d", len(ents), maxCheckpointFiles)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			return nil, fmt.Errorf("checkpoint entry %s is not a regular file (%v)", e.Name(), e.Type())
		}
		f, err := os.OpenFile(filepath.Join(ckpt, e.Name()), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
		if err != nil {
			return nil, err
		}
		st, err := f.Stat()
		if err != nil || !st.Mode().IsRegular() {
			f.Close()
			return nil, fmt.Errorf("checkpoint entry %s is not a regular file: %v", e.Name(), err)
		}
		field(m, []byte(e.Name()))
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(st.Size()))
		m.Write(n[:])
		// Exactly the size stated: a file growing under us fails.
		if _, err := io.CopyN(m, f, st.Size()); err != nil {
			f.Close()
			return nil, fmt.Errorf("checkpoint entry %s: %w", e.Name(), err)
		}
		var one [1]byte
		k, _ := f.Read(one[:])
		f.Close()
		if k != 0 {
			return nil, fmt.Errorf("checkpoint entry %s grew while it was read", e.Name())
		}
	}
	return m.Sum(nil), nil
}

// sealSnapshot writes the seal of the snapshot name being kept in dir
// (with meta, the bytes of its snapshot.json).
func sealSnapshot(name, dir string, meta []byte) error {
	key, err := snapshotKey(true)
	if err != nil {
		return fmt.Errorf("seal snapshot %s: %w", name, err)
	}
	mac, err := snapshotMAC(key, name, meta, filepath.Join(dir, "checkpoint"))
	if err != nil {
		return fmt.Errorf("seal snapshot %s: %w", name, err)
	}
	return os.WriteFile(filepath.Join(dir, snapshotSealFile), []byte(hex.EncodeToString(mac)+"\n"), 0o600)
}

// readSealedSnapshot returns the snapshot.json of snapshot name (in
// sdir) once its seal was checked: refused with errSnapshotIntegrity if
// anything of it changed since it was kept under that name.
func readSealedSnapshot(name, sdir string) ([]byte, error) {
	meta, err := readBounded(filepath.Join(sdir, snapshotMetaFile), maxSnapshotMeta)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("snapshot %q: %w", name, sberr.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot %q: %w", name, err)
	}
	refuse := func(why string) error {
		return fmt.Errorf("%w: snapshot %q failed its integrity check (%s): it was changed after it was kept, or kept under another name; it is not restored: delete it and take it again", errSnapshotIntegrity, name, why)
	}
	sealHex, err := readBounded(filepath.Join(sdir, snapshotSealFile), 1024)
	if errors.Is(err, os.ErrNotExist) {
		return nil, refuse("it has no seal: kept before snapshots were sealed, or its seal was removed")
	}
	if err != nil {
		return nil, refuse("its seal: " + err.Error())
	}
	seal, err := hex.DecodeString(strings.TrimSpace(string(sealHex)))
	if err != nil {
		return nil, refuse("its seal is not hex")
	}
	key, err := snapshotKey(false)
	if err != nil {
		return nil, err
	}
	mac, err := snapshotMAC(key, name, meta, filepath.Join(sdir, "checkpoint"))
	if err != nil {
		return nil, refuse(err.Error())
	}
	if !hmac.Equal(mac, seal) {
		return nil, refuse("its seal does not match its contents")
	}
	return meta, nil
}

// readBounded reads the regular file p (not through a symlink), at most
// limit bytes; a larger one is refused.
func readBounded(p string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s is over %d bytes", p, limit)
	}
	return b, nil
}
