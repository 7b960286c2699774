package sandboxes

import (
	"context"

	"github.com/code-sandboxes/code-sandboxes/internal/local"
)

// LocalPoolStats counts the local variant's warm-pool activity
// (LocalConfig.WarmPool) in this process.
type LocalPoolStats = local.PoolStats

// LocalWarmPoolStats returns the local variant's warm-pool counters.
func LocalWarmPoolStats() LocalPoolStats { return local.Stats() }

// CloseLocalWarmPools ends the local variant's warm pools of this process
// and the sandboxes waiting in them, and its spare supervisors (started
// ahead of a cold Create: internal/local/spare.go), and returns once those
// are cleaned up;
// sandboxes already handed out are not touched. Without it a pool's
// sandboxes end when the process exits (their supervisors notice). The
// kubernetes variant's pools have kubernetes.ClosePools.
func CloseLocalWarmPools(ctx context.Context) { local.ClosePools(ctx) }
