// Package localtools finds the monitoring tools that tests run — promtool
// (Prometheus's rule tests) and Alertmanager — which hack/tools.sh builds
// from the Go module proxy into a versioned folder of the user's cache, once
// per machine.
package localtools

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// versionsEnv pins the tools' versions; hack/tools.sh reads the same file,
// so the two agree on the cache folder.
//
//go:embed versions.env
var versionsEnv string

// CacheEnv names the environment variable that overrides the root of the
// tools cache (hack/tools.sh honours it too).
const CacheEnv = "PLUMB_TOOLS_CACHE"

// ErrMissing is returned (wrapped, with the command that builds it) when a
// tool is not in the cache.
var ErrMissing = errors.New("tool is missing")

// Dir is the folder that holds the pinned tools' executables.
func Dir() (string, error) {
	values := map[string]string{}
	for _, line := range strings.Split(versionsEnv, "\n") {
		if key, value, ok := strings.Cut(strings.TrimSpace(line), "="); ok && !strings.HasPrefix(key, "#") {
			values[key] = value
		}
	}
	prometheus, alertmanager := values["PROMETHEUS_VERSION"], values["ALERTMANAGER_VERSION"]
	if prometheus == "" || alertmanager == "" {
		return "", errors.New("localtools/versions.env: PROMETHEUS_VERSION and ALERTMANAGER_VERSION must both be set")
	}
	root := os.Getenv(CacheEnv)
	if root == "" {
		userCache, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("finding the user cache directory (set %s instead): %w", CacheEnv, err)
		}
		root = filepath.Join(userCache, "plumb", "tools")
	}
	// The stamp must match hack/tools.sh's.
	return filepath.Join(root, fmt.Sprintf("prometheus-%s_alertmanager-%s", prometheus, alertmanager), "bin"), nil
}

// Path is the executable of one tool ("promtool" or "alertmanager"), or an
// error wrapping ErrMissing that names the command that builds it.
func Path(name string) (string, error) {
	dir, err := Dir()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	if info, err := os.Stat(path); err != nil || info.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%w: %s is not built at %s; run `make tools` (hack/tools.sh builds it from the Go module proxy, once per machine)", ErrMissing, name, path)
	}
	return path, nil
}
