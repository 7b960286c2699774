package sandboxes

import (
	"crypto/rand"
	"encoding/hex"
)

var (
	colours = []string{"amber", "azure", "coral", "cyan", "ebony", "indigo", "ivory", "jade", "khaki", "lilac", "mauve", "ochre", "olive", "pearl", "plum", "ruby", "sage", "sepia", "teal", "umber"}
	words   = []string{"brook", "cloud", "delta", "ember", "fjord", "grove", "harbor", "island", "meadow", "mesa", "orbit", "prairie", "reef", "ridge", "river", "summit", "tundra", "valley", "willow", "zephyr"}
)

// generateName makes names like "teal-summit-4f9c", the shape the Python
// package's generate_sandbox_name gives.
func generateName() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return colours[int(b[0])%len(colours)] + "-" + words[int(b[1])%len(words)] + "-" + hex.EncodeToString(b[2:])
}
