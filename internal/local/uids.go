package local

import "github.com/code-sandboxes/code-sandboxes/internal/records"

// As root, every sandbox's user maps to a host uid (and gid) of its own,
// from the local variant's range (records.LocalUIDs), recorded in the
// sandbox's directory (records.AllocHostUID).
func allocHostUID(rt, dir string) (int, error) {
	return records.AllocHostUID(rt, dir, records.LocalUIDs)
}

// rootHostUID is the host uid (and gid) the sandbox's root user maps to:
// one of its own per sandbox, the user's slot in the range right above
// (records.LocalRootUIDs), so that it is no other sandbox's and no host
// user's.
func rootHostUID(userHostUID int) int {
	return records.LocalRootUIDs.Base + userHostUID - records.LocalUIDs.Base
}
