//go:build !linux

package e2bserver

import (
	"context"
	"errors"
	"syscall"
	"time"
)

var errNoVolumes = errors.New("volumes need a Linux host (a loop-mounted file system per volume)")

func volumeSupport() error                                      { return errNoVolumes }
func makeVolumeFS(context.Context, string, string, int64) error { return errNoVolumes }
func mountVolume(string, string) error                          { return errNoVolumes }
func unmountVolume(string) error                                { return nil }

func statTimes(st *syscall.Stat_t) (atime, ctime string) {
	return time.Now().UTC().Format(time.RFC3339Nano), time.Now().UTC().Format(time.RFC3339Nano)
}
