package local

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/code-sandboxes/code-sandboxes/internal/records"
)

// BenchmarkCreateBookkeeping: what a Create pays per sandbox already alive
// in its runtime directory, for the host uid allocation (as root) and the
// sweep (now off Create's path), with 1,000 alive.
func BenchmarkCreateBookkeeping(b *testing.B) {
	b.Setenv(records.HostUIDRegistryEnv, filepath.Join(b.TempDir(), "reg")) // made 0700: the registry must be ours alone
	rt := b.TempDir()
	for i := 0; i < 1000; i++ {
		d := filepath.Join(rt, fmt.Sprintf("d%04d", i))
		if err := os.Mkdir(d, 0o700); err != nil {
			b.Fatal(err)
		}
		_ = os.WriteFile(filepath.Join(d, uidFile), []byte(strconv.Itoa(uidBase+i)), 0o600)
		r := record{ID: fmt.Sprint(i), ShimPid: os.Getpid(), ShimStart: procStart(os.Getpid()), CreatedAt: time.Now()}
		if err := writeRecord(d, &r); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("allocHostUID", func(b *testing.B) {
		d := filepath.Join(rt, "new")
		for i := 0; i < b.N; i++ {
			_ = os.Mkdir(d, 0o700)
			if _, err := allocHostUID(rt, d); err != nil {
				b.Fatal(err)
			}
			os.RemoveAll(d)
		}
	})
	b.Run("sweep", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := sweep(rt); err != nil {
				b.Fatal(err)
			}
		}
	})
}
