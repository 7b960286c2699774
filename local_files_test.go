package sandboxes_test

import (
	"context"
	"errors"
	"testing"
	"time"

	sandboxes "github.com/code-sandboxes/code-sandboxes"
	"github.com/code-sandboxes/code-sandboxes/internal/local"
)

// TestLocalHomeSize: local.Options.HomeSize sizes /home/user beyond the
// default (a 2 GiB file needs it), and is refused above half the memory
// limit, which its pages count against.
func TestLocalHomeSize(t *testing.T) {
	if testing.Short() {
		t.Skip("creates sandboxes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := localConfig(t)
	cfg.Memory = 512 << 20
	cfg.Options = local.Options{RuntimeDir: cfg.Options.(local.Options).RuntimeDir, HomeSize: 300 << 20}
	if sb, err := sandboxes.Create(ctx, cfg); !errors.Is(err, sandboxes.ErrInvalidConfig) {
		if sb != nil {
			sb.Close()
		}
		t.Fatalf("HomeSize above half the memory limit: %v, want ErrInvalidConfig", err)
	}
	cfg.Memory = 3 << 30
	cfg.Options = local.Options{RuntimeDir: cfg.Options.(local.Options).RuntimeDir, HomeSize: 1536 << 20}
	sb, err := sandboxes.Create(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	ex, err := sb.RunCode(ctx, "import os; s = os.statvfs('/home/user'); s.f_blocks * s.f_frsize >> 20")
	if err != nil || ex.Text() != "1536" {
		t.Fatalf("/home/user size: %v %v, want 1536 MiB", ex, err)
	}
}
