package testenv

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// versionsEnv pins the control plane's versions; hack/controlplane.sh reads
// the same file, so the two always agree on the cache folder.
//
//go:embed versions.env
var versionsEnv string

// CacheEnv names the environment variable that overrides the root of the
// binaries cache (hack/controlplane.sh honours it too).
const CacheEnv = "PLUMB_CONTROLPLANE_CACHE"

// ErrBinariesMissing is returned (wrapped, with the command that builds them)
// when the control-plane binaries are not in the cache.
var ErrBinariesMissing = errors.New("control-plane binaries are missing")

// Versions are the pinned versions of the control plane's components.
type Versions struct {
	Kubernetes string
	Etcd       string
	Kwok       string
}

// PinnedVersions parses the versions that this source tree pins.
func PinnedVersions() (Versions, error) {
	values := map[string]string{}
	for i, line := range strings.Split(versionsEnv, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok {
			return Versions{}, fmt.Errorf("versions.env line %d: want KEY=VALUE, got %q", i+1, line)
		}
		values[key] = value
	}
	v := Versions{Kubernetes: values["KUBERNETES_VERSION"], Etcd: values["ETCD_VERSION"], Kwok: values["KWOK_VERSION"]}
	if v.Kubernetes == "" || v.Etcd == "" || v.Kwok == "" {
		return Versions{}, fmt.Errorf("versions.env: KUBERNETES_VERSION, ETCD_VERSION and KWOK_VERSION must all be set")
	}
	return v, nil
}

// folderName is the versioned folder under the cache root; it must match
// the stamp in hack/controlplane.sh.
func (v Versions) folderName() string {
	return fmt.Sprintf("kubernetes-%s_etcd-%s_kwok-%s", v.Kubernetes, v.Etcd, v.Kwok)
}

// DefaultCacheRoot is $PLUMB_CONTROLPLANE_CACHE, or else plumb/controlplane
// under the user's cache directory.
func DefaultCacheRoot() (string, error) {
	if root := os.Getenv(CacheEnv); root != "" {
		return root, nil
	}
	userCache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("finding the user cache directory (set %s instead): %w", CacheEnv, err)
	}
	return filepath.Join(userCache, "plumb", "controlplane"), nil
}

// Binaries locates the control plane's executables and kwok's stage file.
type Binaries struct {
	// Dir holds the executables.
	Dir string
	// KwokStages is the kwok Stage configuration that hack/controlplane.sh wrote.
	KwokStages string
}

// Path is the full path of one executable.
func (b Binaries) Path(name string) string { return filepath.Join(b.Dir, name) }

// apiBinaries are what mode "api" runs; fullBinaries are added in mode "full".
var (
	apiBinaries  = []string{"etcd", "kube-apiserver", "kubectl"}
	fullBinaries = []string{"kube-controller-manager", "kube-scheduler", "kwok"}
)

// FindBinaries returns the binaries under cacheRoot (DefaultCacheRoot when
// empty) for the given mode, or an error wrapping ErrBinariesMissing that
// names the exact command that builds them.
func FindBinaries(cacheRoot string, mode Mode) (Binaries, error) {
	explicit := cacheRoot != ""
	if !explicit {
		var err error
		if cacheRoot, err = DefaultCacheRoot(); err != nil {
			return Binaries{}, err
		}
	}
	versions, err := PinnedVersions()
	if err != nil {
		return Binaries{}, err
	}
	folder := filepath.Join(cacheRoot, versions.folderName())
	b := Binaries{Dir: filepath.Join(folder, "bin"), KwokStages: filepath.Join(folder, "kwok-stages.yaml")}

	want := apiBinaries
	if mode == ModeFull {
		want = append(append([]string{}, apiBinaries...), fullBinaries...)
	}
	var missing []string
	for _, name := range want {
		if info, err := os.Stat(b.Path(name)); err != nil || info.IsDir() || info.Mode()&0o111 == 0 {
			missing = append(missing, name)
		}
	}
	if mode == ModeFull {
		if _, err := os.Stat(b.KwokStages); err != nil {
			missing = append(missing, "kwok-stages.yaml")
		}
	}
	if len(missing) == 0 {
		return b, nil
	}
	command := "make controlplane"
	if explicit || os.Getenv(CacheEnv) != "" {
		command = fmt.Sprintf("%s=%s make controlplane", CacheEnv, cacheRoot)
	}
	return Binaries{}, fmt.Errorf("%w from %s (%s): build them with `%s` (about 9 minutes on a cold machine)",
		ErrBinariesMissing, b.Dir, strings.Join(missing, ", "), command)
}
