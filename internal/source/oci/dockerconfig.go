package oci

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/docker/cli/cli/config/configfile"
)

// SecretKeyDockerConfig is the key of a kubernetes.io/dockerconfigjson
// Secret (`kubectl create secret docker-registry`).
const SecretKeyDockerConfig = ".dockerconfigjson"

// AuthFromDockerConfig picks the account for the registry of the
// repository at url from a Docker config (`{"auths": {"host": {...}}}`,
// with "auth" or "username" and "password"). A registry the config does
// not name is anonymous. Credential stores and helpers are never run:
// the config comes from a tenant's Secret.
func AuthFromDockerConfig(config []byte, url string) (Auth, error) {
	repo, err := (&Client{}).repository(url)
	if err != nil {
		return Auth{}, err
	}
	parsed := configfile.New("")
	// The parser's errors may quote the config: none is shown.
	if err := parsed.LoadFromReader(bytes.NewReader(config)); err != nil {
		return Auth{}, errors.New("the Secret's " + SecretKeyDockerConfig + " is not a Docker config with base64 user:password auths")
	}
	want := registryKey(repo.RegistryStr())
	// Several keys may name the registry (ghcr.io, https://ghcr.io): the
	// first in order is taken, so that every read takes the same one.
	for _, key := range slices.Sorted(maps.Keys(parsed.AuthConfigs)) {
		if registryKey(key) != want {
			continue
		}
		entry := parsed.AuthConfigs[key]
		if entry.IdentityToken != "" || entry.RegistryToken != "" {
			return Auth{}, fmt.Errorf("the Secret's %s holds a token for %s: only a username and password are read", SecretKeyDockerConfig, want)
		}
		return Auth{Username: entry.Username, Password: entry.Password}, nil
	}
	return Auth{}, nil
}

// registryKey is a Docker config's key as a registry host: without a
// scheme or path, and Docker Hub under one name.
func registryKey(key string) string {
	key = strings.ToLower(key)
	key = strings.TrimPrefix(strings.TrimPrefix(key, "https://"), "http://")
	key, _, _ = strings.Cut(key, "/")
	if key == "docker.io" || key == "registry-1.docker.io" {
		return "index.docker.io"
	}
	return key
}
