package client

import (
	"context"
	"fmt"
	"net/http"

	"connectrpc.com/connect"

	"github.com/code-sandboxes/code-sandboxes/internal/envdpb/filesystem/filesystemconnect"
	"github.com/code-sandboxes/code-sandboxes/internal/envdpb/process/processconnect"
	"github.com/code-sandboxes/code-sandboxes/internal/sberr"
)

// Process is envd's process service (Connect RPC) of this sandbox, every
// call carrying the envd headers (token, routing, user).
func (c *Client) Process() processconnect.ProcessClient {
	return processconnect.NewProcessClient(c.hc, c.o.EnvdURL, connect.WithInterceptors(headerInterceptor{c.EnvdHeaders()}))
}

// Filesystem is envd's filesystem service (Connect RPC) of this sandbox,
// every call carrying the envd headers; opts add to that (a read bound).
func (c *Client) Filesystem(opts ...connect.ClientOption) filesystemconnect.FilesystemClient {
	opts = append([]connect.ClientOption{connect.WithInterceptors(headerInterceptor{c.EnvdHeaders()})}, opts...)
	return filesystemconnect.NewFilesystemClient(c.hc, c.o.EnvdURL, opts...)
}

// ConnectError wraps a Connect RPC error with the sentinel its code means,
// so errors.Is works on it as on the HTTP calls' errors.
func ConnectError(op string, err error) error {
	if err == nil {
		return nil
	}
	var kind error
	switch connect.CodeOf(err) {
	case connect.CodeNotFound:
		kind = sberr.ErrNotFound
	case connect.CodeAlreadyExists:
		kind = sberr.ErrAlreadyExists
	case connect.CodeInvalidArgument, connect.CodeFailedPrecondition, connect.CodeOutOfRange:
		kind = sberr.ErrInvalidInput
	case connect.CodeUnauthenticated:
		kind = sberr.ErrUnauthorized
	case connect.CodePermissionDenied:
		kind = sberr.ErrPermission
	case connect.CodeUnavailable:
		kind = sberr.ErrUnavailable
	case connect.CodeDeadlineExceeded:
		kind = sberr.ErrTimeout
	case connect.CodeUnimplemented:
		kind = sberr.ErrNotSupported
	case connect.CodeResourceExhausted:
		kind = sberr.ErrRateLimited
	}
	if kind != nil {
		return fmt.Errorf("%s: %w: %w", op, kind, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// headerInterceptor adds fixed headers to every Connect call.
type headerInterceptor struct{ h http.Header }

func (i headerInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		for k, v := range i.h {
			req.Header()[k] = v
		}
		return next(ctx, req)
	}
}

func (i headerInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		for k, v := range i.h {
			conn.RequestHeader()[k] = v
		}
		return conn
	}
}

func (i headerInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
