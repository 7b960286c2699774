// Package ids makes the random names every variant gives its sandboxes:
// public ids and access tokens.
package ids

import (
	"crypto/rand"
	"encoding/hex"
)

const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// Sandbox returns a sandbox id: the variant's one-letter prefix ('l'
// local, 'd' docker, 'k' kubernetes) and 16 random lower-case letters and
// digits (about 82 bits), usable as a file, label and DNS name.
func Sandbox(prefix byte) string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	out := make([]byte, 1+len(b))
	out[0] = prefix
	for i, c := range b {
		// 256 % 36 = 4: a bias of under 2 % on a few letters, which costs
		// less than a bit of the id's 82.
		out[1+i] = alphabet[int(c)%len(alphabet)]
	}
	return string(out)
}

// Token returns n random bytes as hex: an access token.
func Token(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
