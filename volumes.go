package sandboxes

import (
	"fmt"
	"path"
	"strings"
)

// VolumeMount mounts a volume read-write into a sandbox at Path.
//
// Source is, on local and docker, an absolute host directory (the caller
// owns it: its size bound and who else sees it); on kubernetes, the name of
// a PersistentVolumeClaim in the sandbox's namespace. serve gives each team
// size-bounded volumes of its own (E2B's Volume API).
type VolumeMount struct {
	Source string
	Path   string
}

// maxVolumes bounds the mounts of one sandbox.
const maxVolumes = 16

// reservedVolumePaths are where a volume may not go, nor under: the
// kernel's file systems and the system directories the sandbox runs from.
var reservedVolumePaths = []string{"/proc", "/sys", "/dev", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/run"}

// contractPaths are the sandbox contract's own mounts: a volume may go
// below them, not over them (it would hide the home, /tmp or /files).
var contractPaths = []string{"/home", "/home/user", "/tmp", "/files", "/var", "/var/tmp"}

// CheckVolumePath says why p can't be where a volume is mounted, or nil:
// an absolute, clean path without "..", not "/", not over the sandbox's own
// mounts (/home/user, /tmp, /files) and not under /proc, /sys, /dev or the
// system directories.
func CheckVolumePath(p string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w: volume path %q: %s", ErrInvalidConfig, p, why)
	}
	switch {
	case p == "" || !strings.HasPrefix(p, "/"):
		return bad("give an absolute path inside the sandbox, e.g. /mnt/data or /home/user/data")
	case len(p) > 1024 || strings.ContainsAny(p, "\x00\n\r:,"):
		return bad("use at most 1024 characters and no NUL, newline, ':' or ','")
	case strings.Contains("/"+p+"/", "/../") || strings.Contains("/"+p+"/", "/./"):
		return bad("no '..' or '.' components; give the path itself")
	case path.Clean(p) == "/":
		return bad("a volume can't replace the root; mount it at a directory such as /mnt/data")
	}
	c := path.Clean(p)
	for _, r := range reservedVolumePaths {
		if c == r || strings.HasPrefix(c, r+"/") {
			return bad(r + " is the system's; mount it elsewhere, e.g. /mnt/data or /home/user/data")
		}
	}
	for _, r := range contractPaths {
		if c == r {
			return bad("it would hide the sandbox's own " + r + "; mount it below, e.g. " + r + "/data")
		}
	}
	return nil
}

// checkVolumes checks a sandbox's mounts: valid paths, at most maxVolumes,
// and none at or under another's path (one would hide the other).
func checkVolumes(vs []VolumeMount) error {
	if len(vs) > maxVolumes {
		return fmt.Errorf("%w: %d volumes; a sandbox mounts at most %d", ErrInvalidConfig, len(vs), maxVolumes)
	}
	for i, v := range vs {
		if err := CheckVolumePath(v.Path); err != nil {
			return err
		}
		if v.Source == "" {
			return fmt.Errorf("%w: volume at %q has no Source", ErrInvalidConfig, v.Path)
		}
		a := path.Clean(v.Path)
		for _, w := range vs[:i] {
			b := path.Clean(w.Path)
			if a == b || strings.HasPrefix(a, b+"/") || strings.HasPrefix(b, a+"/") {
				return fmt.Errorf("%w: volumes at %q and %q overlap; give each a path of its own", ErrInvalidConfig, w.Path, v.Path)
			}
		}
	}
	return nil
}
