package git

import (
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// Auth holds the credentials for one repository. Its String method never
// prints a value, so an Auth is safe to log by accident.
type Auth struct {
	// Username and Password authenticate over HTTP(S) with basic auth
	// (a token usually goes in Password).
	Username string
	Password string
	// BearerToken authenticates over HTTP(S) with "Authorization: Bearer".
	BearerToken string
	// SSHPrivateKey is a PEM private key for ssh:// and scp-like URLs,
	// SSHPassphrase its passphrase if it has one.
	SSHPrivateKey []byte
	SSHPassphrase string
	// KnownHosts lists the SSH host keys to trust (known_hosts format). An
	// SSH connection without it, or to a host whose key it lacks, is refused.
	KnownHosts []byte
	// CABundle adds certificate authorities for HTTPS.
	CABundle []byte
}

// String describes which credentials are set, never their values.
func (a Auth) String() string {
	return fmt.Sprintf("git.Auth{username:%t password:%t bearerToken:%t sshPrivateKey:%t knownHosts:%t caBundle:%t}",
		a.Username != "", a.Password != "", a.BearerToken != "", len(a.SSHPrivateKey) > 0, len(a.KnownHosts) > 0, len(a.CABundle) > 0)
}

// GoString is String, so %#v does not print values either.
func (a Auth) GoString() string { return a.String() }

// ErrAuth marks credentials that are missing, malformed or refused.
var ErrAuth = errors.New("authentication failed")

// method builds go-git's auth method for an endpoint.
func (a Auth) method(ep *transport.Endpoint) (transport.AuthMethod, error) {
	switch ep.Protocol {
	case "http", "https":
		switch {
		case a.BearerToken != "":
			return &githttp.TokenAuth{Token: a.BearerToken}, nil
		case a.Username != "" || a.Password != "":
			return &githttp.BasicAuth{Username: a.Username, Password: a.Password}, nil
		}
		return nil, nil
	case "ssh":
		if len(a.SSHPrivateKey) == 0 {
			return nil, fmt.Errorf("%w: an ssh URL needs a private key (identity) in the secret", ErrAuth)
		}
		if len(a.KnownHosts) == 0 {
			return nil, fmt.Errorf("%w: an ssh URL needs known_hosts in the secret; unknown host keys are refused", ErrAuth)
		}
		user := ep.User
		if user == "" {
			user = "git"
		}
		keys, err := gitssh.NewPublicKeys(user, a.SSHPrivateKey, a.SSHPassphrase)
		if err != nil {
			// The parser's message names no key material.
			return nil, fmt.Errorf("%w: parsing the ssh private key: %v", ErrAuth, err)
		}
		callback, err := knownHostsCallback(a.KnownHosts)
		if err != nil {
			return nil, err
		}
		keys.HostKeyCallback = callback
		return keys, nil
	default: // file
		return nil, nil
	}
}

// knownHostsCallback verifies host keys against known_hosts content. The
// knownhosts package reads files, so the content goes through a temporary one.
func knownHostsCallback(content []byte) (ssh.HostKeyCallback, error) {
	f, err := os.CreateTemp("", "plumb-known-hosts-")
	if err != nil {
		return nil, fmt.Errorf("writing known_hosts: %w", err)
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(content); err != nil {
		f.Close()
		return nil, fmt.Errorf("writing known_hosts: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("writing known_hosts: %w", err)
	}
	callback, err := knownhosts.New(f.Name())
	if err != nil {
		return nil, fmt.Errorf("%w: parsing known_hosts: %v", ErrAuth, err)
	}
	return func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		if err := callback(hostname, remote, key); err != nil {
			var keyErr *knownhosts.KeyError
			if errors.As(err, &keyErr) {
				if len(keyErr.Want) == 0 {
					return fmt.Errorf("%w: host key of %s is not in known_hosts", ErrAuth, hostname)
				}
				return fmt.Errorf("%w: host key of %s does not match known_hosts (possible man-in-the-middle)", ErrAuth, hostname)
			}
			return fmt.Errorf("%w: checking the host key of %s: %v", ErrAuth, hostname, err)
		}
		return nil
	}, nil
}
