package testenv

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Registry is a real OCI registry (CNCF Distribution's `registry`, which
// hack/tools.sh builds into the user cache) on a loopback port, with
// filesystem storage and htpasswd authentication.
type Registry struct {
	// Host is host:port, as image references name it.
	Host string
	// Username and Password are the one account it accepts.
	Username, Password string
	// Storage is the folder that holds its blobs and manifests (a test
	// may alter a blob there, as a hostile registry would serve it).
	Storage string

	dir  string // its config, htpasswd and log
	bin  string
	proc *process
}

// StartRegistry starts a registry for a test, stopped when the test ends.
// A registry that cannot start (its binary missing included) fails the
// test with the reason and the command that fixes it.
func StartRegistry(t testing.TB) *Registry {
	t.Helper()
	bin, err := ToolPath("registry")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	r := &Registry{Host: FreeAddrsForTest(t, 1)[0], Username: "plumb", Password: "registry-password"}
	hash, err := bcrypt.GenerateFromPassword([]byte(r.Password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	htpasswd := filepath.Join(dir, "htpasswd")
	if err := os.WriteFile(htpasswd, []byte(r.Username+":"+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r.Storage = filepath.Join(dir, "data")
	if err := os.WriteFile(filepath.Join(dir, "config.yml"), []byte(registryConfig(r.Host, r.Storage, htpasswd)), 0o600); err != nil {
		t.Fatal(err)
	}
	r.dir, r.bin = dir, bin
	r.Start(t)
	t.Cleanup(func() {
		if r.proc != nil {
			_ = r.proc.stop(10 * time.Second)
		}
	})
	return r
}

// Start starts the registry again after Stop, on the same address and
// with the same content.
func (r *Registry) Start(t testing.TB) {
	t.Helper()
	proc, err := startProcess("registry", r.bin, []string{"serve", filepath.Join(r.dir, "config.yml")}, r.dir)
	if err != nil {
		t.Fatal(err)
	}
	r.proc = proc
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.waitReady(ctx); err != nil {
		t.Fatalf("the registry did not become ready: %v; last lines of its log:\n%s", err, tail(r.proc.logPath, 30))
	}
}

// Stop stops the registry (an outage) until Start.
func (r *Registry) Stop(t testing.TB) {
	t.Helper()
	if err := r.proc.stop(10 * time.Second); err != nil {
		t.Logf("stopping the registry: %v", err)
	}
	r.proc = nil
}

// URL is the oci:// URL of a repository of the registry.
func (r *Registry) URL(repository string) string { return "oci://" + r.Host + "/" + repository }

// DockerConfig is a kubernetes.io/dockerconfigjson Secret's
// .dockerconfigjson for the registry's account.
func (r *Registry) DockerConfig() []byte {
	auth := base64.StdEncoding.EncodeToString([]byte(r.Username + ":" + r.Password))
	return []byte(fmt.Sprintf(`{"auths":{%q:{"auth":%q}}}`, r.Host, auth))
}

// registryConfig is the registry's configuration: plain HTTP on addr
// (loopback), blobs under root, the accounts of htpasswd.
func registryConfig(addr, root, htpasswd string) string {
	return strings.Join([]string{
		"version: 0.1",
		"log:",
		"  level: warn",
		"  accesslog: {disabled: true}",
		"storage:",
		fmt.Sprintf("  filesystem: {rootdirectory: %q}", root),
		"  delete: {enabled: true}",
		"http:",
		fmt.Sprintf("  addr: %q", addr),
		"  secret: plumb-test-registry-http-secret",
		"auth:",
		"  htpasswd:",
		"    realm: plumb-test",
		fmt.Sprintf("    path: %q", htpasswd),
		"",
	}, "\n")
}

// waitReady polls the registry's API root until it answers as a registry
// with authentication does: 401 without credentials.
func (r *Registry) waitReady(ctx context.Context) error {
	client := &http.Client{Timeout: 2 * time.Second}
	defer client.CloseIdleConnections()
	return wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if err := r.proc.errIfExited(); err != nil {
			return false, err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.Host+"/v2/", nil)
		if err != nil {
			return false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return false, nil
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusUnauthorized, nil
	})
}
