//go:build linux && !cgo

package isolate

// wantInPlaceHere: without cgo stage 1 hardens in place when asked to.
func wantInPlaceHere() bool { return true }
