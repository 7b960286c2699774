package environment

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/code-sandboxes/code-sandboxes/internal/egress"
)

// stepsPolicy is where build steps may connect (the jail's egress stack):
// the internet, never the host's own addresses, link-local or the private
// ranges. A tenant's image pull (Store.TenantPulls) goes by the same.
var stepsPolicy = egress.Policy{Mode: egress.ModeAll}

// registryConn is how a build talks to image registries.
type registryConn struct {
	opts   []remote.Option
	tr     *http.Transport // nil: go-containerregistry's default
	tenant bool
}

// registryFor returns the registry options of a build: with TenantPulls,
// a transport whose every connection (redirects and token realms too) is
// checked by the steps' policy at dial time, and no proxy from the
// environment (a proxy would connect on our behalf, unchecked).
func registryFor(ctx context.Context, tenant bool, loopback []int) (*registryConn, error) {
	r := &registryConn{opts: []remote.Option{remote.WithContext(ctx)}, tenant: tenant}
	if !tenant {
		return r, nil
	}
	g, err := egress.NewGuard(stepsPolicy, loopback)
	if err != nil {
		return nil, err
	}
	r.tr = &http.Transport{
		DialContext:            g.DialContext,
		ForceAttemptHTTP2:      true,
		TLSHandshakeTimeout:    15 * time.Second,
		ResponseHeaderTimeout:  time.Minute,
		MaxResponseHeaderBytes: 64 << 10,
		IdleConnTimeout:        30 * time.Second,
		MaxIdleConns:           8,
	}
	r.opts = append(r.opts, remote.WithTransport(r.tr))
	return r, nil
}

func (r *registryConn) close() {
	if r != nil && r.tr != nil {
		r.tr.CloseIdleConnections()
	}
}

// pullErr is what a failed registry request says: for a tenant's pull, a
// short reason in our words (a foreign server's status code, never its
// body, headers or URLs, which would hand a tenant whatever a server we
// reached answered).
func (r *registryConn) pullErr(image string, err error) error {
	if err == nil {
		return nil
	}
	if !r.tenant {
		return fmt.Errorf("%w: base image %s: %w", ErrBuildFailed, image, err)
	}
	return &PullError{Reason: "base image " + image + ": " + pullReason(err), err: err}
}

// PullError is a tenant's failed image pull. Error is the sanitized
// reason; Unwrap gives the full error for the operator's own logs.
type PullError struct {
	Reason string
	err    error
}

func (e *PullError) Error() string { return e.Reason }
func (e *PullError) Unwrap() error { return e.err }

// Is makes a PullError an ErrBuildFailed too.
func (e *PullError) Is(target error) bool { return target == ErrBuildFailed }

func pullReason(err error) string {
	var refused *egress.RefusedError
	var te *transport.Error
	var dns *net.DNSError
	var unknownCA x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	var hostname x509.HostnameError
	var record tls.RecordHeaderError
	var errno syscall.Errno
	var ne net.Error
	switch {
	case errors.As(err, &refused):
		return "refused: the registry's address " + refused.Dst.String() + " is not one builds may reach (" + refused.Why +
			"); builds reach the internet only, and of this machine only a loopback port its operator opened (serve --template-build-loopback-port)"
	case errors.Is(err, egress.ErrRefused):
		return "refused: builds reach the internet only"
	case errors.As(err, &te):
		return fmt.Sprintf("the registry answered %d %s", te.StatusCode, http.StatusText(te.StatusCode))
	case errors.Is(err, context.Canceled):
		return "cancelled"
	case errors.Is(err, context.DeadlineExceeded):
		return "the registry did not answer in time"
	case errors.As(err, &dns):
		return "the registry's name does not resolve"
	case errors.As(err, &unknownCA), errors.As(err, &invalid), errors.As(err, &hostname):
		return "the registry's TLS certificate is not trusted"
	case errors.As(err, &record):
		return "the registry does not speak TLS (only a registry on an opened loopback port may use plain HTTP)"
	case errors.As(err, &errno) && errno == syscall.ECONNREFUSED:
		return "the registry refused the connection"
	case errors.As(err, &ne) && ne.Timeout():
		return "the registry did not answer in time"
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "the registry closed the connection early"
	}
	return "the registry's answer is not an image this server can use"
}

// pullReader marks the errors of reading an image's layers (they come
// from the registry) so that they are reported as a pull's.
type pullReader struct{ r io.Reader }

type layerReadError struct{ err error }

func (e *layerReadError) Error() string { return "read image layer: " + e.err.Error() }
func (e *layerReadError) Unwrap() error { return e.err }

func (p pullReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if err != nil && err != io.EOF {
		err = &layerReadError{err}
	}
	return n, err
}
