package local

import "github.com/code-sandboxes/code-sandboxes/internal/records"

// As root, every sandbox's user maps to a host uid (and gid) of its own,
// from the local variant's range (records.LocalUIDs), recorded in the
// sandbox's directory (records.AllocHostUID).
func allocHostUID(rt, dir string) (int, error) {
	return records.AllocHostUID(rt, dir, records.LocalUIDs)
}
