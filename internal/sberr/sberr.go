// Package sberr holds the sentinel errors shared by the public package and
// the internal ones, so that errors.Is works across every layer.
package sberr

import (
	"errors"
	"fmt"
)

var (
	ErrNotSupported  = errors.New("not supported by this variant")
	ErrNotFound      = errors.New("not found")
	ErrTimeout       = errors.New("timed out")
	ErrInvalidConfig = errors.New("invalid config")
	ErrClosed        = errors.New("sandbox is closed")
	ErrUnauthorized  = errors.New("unauthorized")
	ErrRateLimited   = errors.New("rate limited")
	ErrInvalidInput  = errors.New("invalid input")
	ErrAlreadyExists = errors.New("already exists")
	ErrUnavailable   = errors.New("sandbox unavailable")
	ErrPermission    = errors.New("permission denied")
	// ErrNoRoom is an ErrUnavailable that passes: the host has no room for
	// another sandbox now (no process ids or memory left), and may once others close.
	ErrNoRoom = fmt.Errorf("%w: no room on this host", ErrUnavailable)
)
