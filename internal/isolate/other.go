//go:build !linux

package isolate

import (
	"context"
	"errors"
	"os"
	"os/exec"
)

var errUnsupported = errors.New("isolate: sandboxes need Linux (namespaces, cgroups, seccomp)")

// Process is a started sandbox (Linux only).
type Process struct {
	Pid int
	ID  string
	TUN *os.File
}

func Start(context.Context, Spec) (*Process, error) { return nil, errUnsupported }
func CheckSupport() error                           { return errUnsupported }
func AttachTUN(int) (*os.File, error)               { return nil, errUnsupported }
func IsChild() bool                                 { return false }
func IsSudo() bool                                  { return false }
func Sudo() int                                     { return 1 }
func RootAvailable() bool                           { return false }
func ReleaseRootBroker()                            {}
func RootOpen(string, int, os.FileMode, bool) (*os.File, error) {
	return nil, errUnsupported
}
func Child() error                         { return errUnsupported }
func StartOwnedBy(*exec.Cmd, int) error    { return errUnsupported }
func LoadSeccompAllThreads() error         { return errUnsupported }
func (p *Process) Wait() (ExitInfo, error) { return ExitInfo{}, errUnsupported }
func (p *Process) Kill() error             { return errUnsupported }
func (p *Process) Cleanup() error          { return nil }
func (p *Process) CgroupDirs() []string    { return nil }

// SetEarlyStart and EarlyState: see child.go.
func SetEarlyStart(func() (string, []*os.File)) {}

func EarlyState() string { return "" }

// ConfigShape: no child config without Linux.
func ConfigShape() any { return struct{}{} }

// CheckRoom, RoomShortage and the headrooms: see room.go.
func CheckRoom() error                      { return nil }
func RoomShortage() error                   { return nil }
func TaskHeadroom() (int64, string, bool)   { return 0, "", false }
func MemoryHeadroom() (int64, string, bool) { return 0, "", false }
