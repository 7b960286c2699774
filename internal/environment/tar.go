package environment

import (
	"context"
	"errors"
	"io"
)

// WriteTar writes the rootfs at dir as an uncompressed tar stream (owners,
// modes, symlinks and hard links kept), for `docker import` and the like.
func WriteTar(ctx context.Context, dir string, w io.Writer) error {
	return errors.New("not implemented yet")
}
