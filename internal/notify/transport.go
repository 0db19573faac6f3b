package notify

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"syscall"
	"time"

	"github.com/plumb-dev/plumb/internal/egress"
)

// NewClient is the HTTP client that sinks are reached with: it refuses to
// connect to an address in blocked (checked on the address actually dialled,
// after DNS, so a name cannot smuggle one in), follows no redirect (a
// redirect is the sink's answer, not a new target), and uses no proxy.
func NewClient(blocked []netip.Prefix) *http.Client {
	dialer := egress.NewDialer(blocked, 10*time.Second)
	return &http.Client{
		Transport: &http.Transport{
			DialContext:           dialer.DialContext,
			TLSHandshakeTimeout:   10 * time.Second,
			ResponseHeaderTimeout: 10 * time.Second,
			MaxIdleConnsPerHost:   2,
			IdleConnTimeout:       90 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// errBlocked says a sink's address is blocked (egress.ErrBlocked, in the
// sink's words).
var errBlocked = errors.New("the sink's address is in a blocked range")

// transportError describes a failed request by what went wrong, naming
// neither the sink's URL nor its host nor its address: a sink's URL may
// carry a token (Slack's do) and comes from a Secret, and errors reach
// logs and the Notification's status. DNS, dial and TLS errors all name
// the host, so none is passed on as it is.
func transportError(err error) error {
	var (
		dnsErr      *net.DNSError
		hostnameErr x509.HostnameError
		authority   x509.UnknownAuthorityError
		invalid     x509.CertificateInvalidError
		verify      *tls.CertificateVerificationError
		record      tls.RecordHeaderError
		alert       tls.AlertError
	)
	switch {
	case errors.Is(err, egress.ErrBlocked):
		return &permanentError{err: errBlocked}
	case errors.As(err, &dnsErr):
		if dnsErr.IsTimeout {
			return errors.New("resolving the sink's host name timed out")
		}
		return errors.New("could not resolve the sink's host name")
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		return errors.New("the sink did not answer in time")
	case errors.Is(err, syscall.ECONNREFUSED):
		return errors.New("the sink refused the connection")
	case errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("the sink closed the connection")
	case errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH):
		return errors.New("the sink's address cannot be reached")
	case errors.As(err, &hostnameErr):
		return errors.New("TLS: the sink's certificate is not valid for its host name")
	case errors.As(err, &authority):
		return errors.New("TLS: the sink's certificate is signed by an unknown authority")
	case errors.As(err, &invalid):
		return errors.New("TLS: the sink's certificate is not valid (expired, or not for serving)")
	case errors.As(err, &verify):
		return errors.New("TLS: the sink's certificate could not be verified")
	case errors.As(err, &record):
		return errors.New("TLS: the sink does not speak TLS")
	case errors.As(err, &alert):
		return fmt.Errorf("TLS: the sink refused the handshake (%s)", alert.Error())
	}
	var u *url.Error
	if errors.As(err, &u) {
		return fmt.Errorf("the %s request to the sink failed", u.Op)
	}
	return errors.New("the request to the sink failed")
}

// isTimeout reports whether err says it is a timeout.
func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}
