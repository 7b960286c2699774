package egress

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// AppliedFile is where a sandbox's network supervisor says which policy it
// applies (Digest of it), so that an update returns once it is in force,
// not merely requested.
const AppliedFile = "network.applied"

// Digest names a policy.
func Digest(p Policy) string {
	b, _ := json.Marshal(p)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// WriteApplied records, in the sandbox's directory, the policy the
// supervisor now applies (or why it refused one: "error: …").
func WriteApplied(dir, what string) error {
	tmp := filepath.Join(dir, AppliedFile+".tmp")
	if err := os.WriteFile(tmp, []byte(what), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, AppliedFile))
}

// WaitApplied waits (bounded by ctx, and at most 10 s) until the supervisor
// of the sandbox in dir applies p.
func WaitApplied(ctx context.Context, dir string, p Policy) error {
	want := Digest(p)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		b, err := os.ReadFile(filepath.Join(dir, AppliedFile))
		if err == nil {
			got := string(b)
			if got == want {
				return nil
			}
			if strings.HasPrefix(got, "error: ") {
				return fmt.Errorf("the network supervisor refused the update: %s", strings.TrimPrefix(got, "error: "))
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the network supervisor did not apply the update: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}
