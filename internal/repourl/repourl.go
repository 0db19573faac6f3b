// Package repourl is the one home of what plumb reads from a repository
// URL: its canonical form (so that a push naming a repository in any of
// its spellings finds the Apps that track it in another), its owner/name
// path (for commit statuses and commit links), and the URL without the
// credentials it may carry (for events and messages); and the canonical
// form of an OCI repository (for registry push events).
package repourl

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// validPath and validHost are what Git hosts accept in repository paths
// and host names (IPv6 addresses included).
var (
	validPath = regexp.MustCompile(`^[A-Za-z0-9._~+-]+(/[A-Za-z0-9._~+-]+)*$`)
	validHost = regexp.MustCompile(`^([A-Za-z0-9.-]+|[0-9A-Fa-f:.]+)$`)
)

// defaultPorts are dropped from canonical URLs.
var defaultPorts = map[string]string{"https": "443", "http": "80", "ssh": "22", "git": "9418"}

// Canonical returns the canonical form of a repository URL:
// host[:port]/path, with the scheme and user dropped, the host lower-cased,
// default ports removed, and a trailing ".git" or "/" trimmed. https://,
// http://, ssh://, git:// and scp-like user@host:org/repo spellings of one
// repository normalise alike.
func Canonical(raw string) (string, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return "", fmt.Errorf("empty repository URL")
	}
	var host, port, path string
	if scheme, _, ok := strings.Cut(raw, "://"); ok {
		u, err := url.Parse(raw)
		if err != nil {
			var urlErr *url.Error // it quotes the URL whole, password and all
			if errors.As(err, &urlErr) {
				err = urlErr.Err
			}
			return "", fmt.Errorf("repository URL %s: %w", WithoutCredentials(raw), err)
		}
		scheme = strings.ToLower(scheme)
		if _, known := defaultPorts[scheme]; !known {
			return "", fmt.Errorf("repository URL: unsupported scheme %q", scheme)
		}
		host, port, path = u.Hostname(), u.Port(), u.Path
		if port == defaultPorts[scheme] {
			port = ""
		}
	} else {
		// scp-like: [user@]host:path (no port possible in this form).
		at := strings.LastIndex(raw[:max(strings.Index(raw, ":"), 0)], "@")
		rest := raw[at+1:]
		h, p, ok := strings.Cut(rest, ":")
		if !ok || h == "" || strings.ContainsAny(h, "/") {
			return "", fmt.Errorf("repository URL %q: want scheme://host/path or user@host:path", WithoutCredentials(raw))
		}
		host, path = h, p
	}
	if host == "" {
		return "", fmt.Errorf("repository URL %q has no host", WithoutCredentials(raw))
	}
	for trimmed := ""; trimmed != path; {
		trimmed = path
		path = strings.TrimSuffix(strings.Trim(path, "/"), ".git")
	}
	if path == "" {
		return "", fmt.Errorf("repository URL %q has no repository path", WithoutCredentials(raw))
	}
	if !validPath.MatchString(path) || !validHost.MatchString(host) {
		return "", fmt.Errorf("repository URL %q has characters no repository host or path uses", WithoutCredentials(raw))
	}
	if strings.Contains(host, ":") && net.ParseIP(host) == nil {
		return "", fmt.Errorf("repository URL %q: host %q is neither a name nor an IP address", WithoutCredentials(raw), host)
	}
	canonical := strings.ToLower(host)
	switch {
	case port != "":
		canonical = net.JoinHostPort(canonical, port)
	case strings.Contains(canonical, ":"):
		canonical = "[" + canonical + "]" // an IPv6 address
	}
	return canonical + "/" + path, nil
}

// OwnerPath is owner/name (or group/subgroup/name on GitLab) of a
// repository URL: https://host/owner/name(.git), ssh://git@host/owner/name
// or git@host:owner/name.
func OwnerPath(raw string) (string, error) {
	path := ""
	if u, err := url.Parse(raw); err == nil && u.Host != "" {
		path = u.Path
	} else if at := strings.Index(raw, "@"); at >= 0 {
		if _, after, ok := strings.Cut(raw[at:], ":"); ok {
			path = after // scp-like: git@host:owner/name
		}
	}
	path = strings.TrimSuffix(strings.Trim(path, "/"), ".git")
	if strings.Count(path, "/") < 1 || strings.Contains(path, "..") {
		return "", errors.New("the App's source URL names no owner/repository")
	}
	return path, nil
}

// WithoutCredentials is a repository URL without the user and password it
// may carry. A URL with an "@" that is not the end of its user part (one
// that does not parse, or a password holding "/", "?" or "#", which moves
// the "@" into the path) shows "***" for all that stands between its
// scheme and its last "@": nothing of a password is guessed at. An
// scp-like user@host:path names a user, never a password, and is kept.
func WithoutCredentials(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	at := strings.LastIndex(rest, "@")
	if !ok || at < 0 {
		return raw
	}
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		u.User = nil
		if clean := u.String(); !strings.Contains(clean[strings.Index(clean, "://")+3:], "@") {
			return clean
		}
	}
	return scheme + "://***@" + rest[at+1:]
}

// HidesCredentials says whether raw is a URL whose "@" stands where it
// does not end a user part, so that WithoutCredentials masks more than a
// user and password: a password holding "/", "?" or "#" unencoded, most
// likely, which no Git server would be asked with.
func HidesCredentials(raw string) bool {
	return strings.Contains(WithoutCredentials(raw), "://***@")
}

// Registry returns the canonical form of an OCI repository, however a
// registry or an App spells it (oci://host/path, host/path, host/path:tag,
// host/path@sha256:…, any case): host[:port]/path lower-cased, without
// its tag or digest, and Docker Hub as index.docker.io with its library/
// namespace, so that a registry's push event finds the Apps that read the
// repository.
func Registry(raw string) (string, error) {
	s := strings.ToLower(strings.TrimSpace(raw))
	s = strings.TrimSuffix(strings.TrimPrefix(s, "oci://"), "/")
	if s == "" || strings.Contains(s, "//") {
		return "", fmt.Errorf("%q is not an OCI repository", raw)
	}
	if rest, ok := strings.CutPrefix(s, "registry-1.docker.io/"); ok {
		s = "index.docker.io/" + rest // Docker Hub's registry host
	}
	ref, err := name.ParseReference(s, name.WeakValidation)
	if err != nil {
		return "", fmt.Errorf("%q is not an OCI repository: %w", raw, err)
	}
	return ref.Context().Name(), nil
}
