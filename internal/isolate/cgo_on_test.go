//go:build linux && cgo

package isolate

// wantInPlaceHere: with cgo the runtime can't change every thread, so
// stage 1 falls back to the re-exec even when asked to harden in place.
func wantInPlaceHere() bool { return false }
