package testenv

// The tools that tests run — promtool (Prometheus's rule tests),
// Alertmanager, CNCF Distribution's registry, cosign and versitygw — which hack/tools.sh
// builds from the Go module proxy into a versioned folder of the user's
// cache, once per machine.

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// toolsEnv pins the tools' versions; hack/tools.sh reads the same file,
// so the two agree on the cache folder.
//
//go:embed tools.env
var toolsEnv string

// ToolsCacheEnv names the environment variable that overrides the root of
// the tools cache (hack/tools.sh honours it too).
const ToolsCacheEnv = "PLUMB_TOOLS_CACHE"

// ErrToolMissing is returned (wrapped, with the command that builds it)
// when a tool is not in the cache.
var ErrToolMissing = errors.New("tool is missing")

// ToolsDir is the folder that holds the pinned tools' executables (all but
// cosign and versitygw, which have folders of their own).
func ToolsDir() (string, error) {
	values, root, err := toolsRoot()
	if err != nil {
		return "", err
	}
	prometheus, alertmanager, distribution := values["PROMETHEUS_VERSION"], values["ALERTMANAGER_VERSION"], values["DISTRIBUTION_VERSION"]
	if prometheus == "" || alertmanager == "" || distribution == "" {
		return "", errors.New("internal/testenv/tools.env: PROMETHEUS_VERSION, ALERTMANAGER_VERSION and DISTRIBUTION_VERSION must all be set")
	}
	// The stamp must match hack/tools.sh's.
	return filepath.Join(root, fmt.Sprintf("prometheus-%s_alertmanager-%s_distribution-%s", prometheus, alertmanager, distribution), "bin"), nil
}

// CosignDir is the folder of the pinned cosign (a folder of its own, so
// that changing its version rebuilds nothing else).
func CosignDir() (string, error) {
	values, root, err := toolsRoot()
	if err != nil {
		return "", err
	}
	if values["COSIGN_VERSION"] == "" {
		return "", errors.New("internal/testenv/tools.env: COSIGN_VERSION must be set")
	}
	return filepath.Join(root, "cosign-"+values["COSIGN_VERSION"], "bin"), nil
}

// versitygwDir is the folder of the pinned versitygw.
func versitygwDir() (string, error) {
	values, root, err := toolsRoot()
	if err != nil {
		return "", err
	}
	if values["VERSITYGW_VERSION"] == "" {
		return "", errors.New("internal/testenv/tools.env: VERSITYGW_VERSION must be set")
	}
	return filepath.Join(root, "versitygw-"+values["VERSITYGW_VERSION"], "bin"), nil
}

// toolsRoot reads tools.env and finds the root of the tools cache.
func toolsRoot() (map[string]string, string, error) {
	values := map[string]string{}
	for _, line := range strings.Split(toolsEnv, "\n") {
		if key, value, ok := strings.Cut(strings.TrimSpace(line), "="); ok && !strings.HasPrefix(key, "#") {
			values[key] = value
		}
	}
	root := os.Getenv(ToolsCacheEnv)
	if root == "" {
		userCache, err := os.UserCacheDir()
		if err != nil {
			return nil, "", fmt.Errorf("finding the user cache directory (set %s instead): %w", ToolsCacheEnv, err)
		}
		root = filepath.Join(userCache, "plumb", "tools")
	}
	return values, root, nil
}

// ToolPath is the executable of one tool ("promtool", "alertmanager",
// "registry", "cosign" or "versitygw"), or an error wrapping ErrToolMissing that names
// the command that builds it.
func ToolPath(name string) (string, error) {
	find := ToolsDir
	switch name {
	case "cosign":
		find = CosignDir
	case "versitygw":
		find = versitygwDir
	}
	dir, err := find()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	if info, err := os.Stat(path); err != nil || info.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%w: %s is not built at %s; run `make tools` (hack/tools.sh builds it from the Go module proxy, once per machine)", ErrToolMissing, name, path)
	}
	return path, nil
}
