// Package units formats quantities for messages people read.
package units

import "fmt"

// Bytes formats n bytes for a message: "1.2 GiB", "12 MiB", "512 KiB".
func Bytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d KiB", n>>10)
}
