package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// CosignKey is a key pair that `cosign generate-key-pair` made.
type CosignKey struct {
	// Public is the PEM public key (cosign.pub), as an App's verification
	// Secret holds it.
	Public []byte
	// private is the encrypted private key's file, password is its password.
	private, password string
}

// GenerateCosignKey makes a cosign key pair with the pinned cosign (which
// hack/tools.sh builds into the user cache). A missing cosign fails the
// test with the command that builds it.
func GenerateCosignKey(t testing.TB) *CosignKey {
	t.Helper()
	dir := t.TempDir()
	k := &CosignKey{private: filepath.Join(dir, "cosign.key"), password: "cosign-key-password"}
	runCosign(t, dir, k.password, nil, "generate-key-pair")
	public, err := os.ReadFile(filepath.Join(dir, "cosign.pub"))
	if err != nil {
		t.Fatal(err)
	}
	k.Public = public
	return k
}

// Sign signs the manifest digest (sha256:…) of repository with key, as
// `cosign sign` does: its classic format, a signature image tagged
// sha256-<hex>.sig in the same repository, pushed as the registry's
// account. Nothing is sent to a transparency log.
func (r *Registry) Sign(t testing.TB, key *CosignKey, repository, digest string) {
	t.Helper()
	config := t.TempDir()
	if err := os.WriteFile(filepath.Join(config, "config.json"), r.DockerConfig(), 0o600); err != nil {
		t.Fatal(err)
	}
	runCosign(t, t.TempDir(), key.password, []string{"DOCKER_CONFIG=" + config},
		"sign", "--key", key.private, "--tlog-upload=false", "--allow-http-registry", "--allow-insecure-registry",
		"--yes", r.Host+"/"+repository+"@"+digest)
}

// runCosign runs cosign in dir with a HOME of its own (no user's
// configuration or TUF cache is read) and fails the test with its output
// when it fails.
func runCosign(t testing.TB, dir, password string, env []string, args ...string) {
	t.Helper()
	bin, err := ToolPath("cosign")
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append([]string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "COSIGN_PASSWORD=" + password,
		"TUF_ROOT=" + filepath.Join(home, "tuf"), "SIGSTORE_NO_CACHE=true"}, env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cosign %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}
