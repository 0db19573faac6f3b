// Package webhook receives Git push webhooks and brings the matching Apps'
// next tick forward. This file maps repository URLs to one canonical form,
// so that a push naming a repository in any of its spellings finds the Apps
// that track it in another.
package webhook

import (
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"
)

// validPath and validHost are what Git hosts accept in repository paths
// and host names (IPv6 addresses included).
var (
	validPath = regexp.MustCompile(`^[A-Za-z0-9._~+-]+(/[A-Za-z0-9._~+-]+)*$`)
	validHost = regexp.MustCompile(`^([A-Za-z0-9.-]+|[0-9A-Fa-f:.]+)$`)
)

// defaultPorts are dropped from canonical URLs.
var defaultPorts = map[string]string{"https": "443", "http": "80", "ssh": "22", "git": "9418"}

// NormalizeURL returns the canonical form of a repository URL:
// host[:port]/path, with the scheme and user dropped, the host lower-cased,
// default ports removed, and a trailing ".git" or "/" trimmed. https://,
// http://, ssh://, git:// and scp-like user@host:org/repo spellings of one
// repository normalise alike.
func NormalizeURL(raw string) (string, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return "", fmt.Errorf("empty repository URL")
	}
	var host, port, path string
	if scheme, _, ok := strings.Cut(raw, "://"); ok {
		u, err := url.Parse(raw)
		if err != nil {
			return "", fmt.Errorf("repository URL: %w", err)
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
			return "", fmt.Errorf("repository URL %q: want scheme://host/path or user@host:path", raw)
		}
		host, path = h, p
	}
	if host == "" {
		return "", fmt.Errorf("repository URL %q has no host", raw)
	}
	for trimmed := ""; trimmed != path; {
		trimmed = path
		path = strings.TrimSuffix(strings.Trim(path, "/"), ".git")
	}
	if path == "" {
		return "", fmt.Errorf("repository URL %q has no repository path", raw)
	}
	if !validPath.MatchString(path) || !validHost.MatchString(host) {
		return "", fmt.Errorf("repository URL %q has characters no repository host or path uses", raw)
	}
	if strings.Contains(host, ":") && net.ParseIP(host) == nil {
		return "", fmt.Errorf("repository URL %q: host %q is neither a name nor an IP address", raw, host)
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
