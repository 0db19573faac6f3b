package testenv

import (
	"context"
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
	config := filepath.Join(dir, "config.yml")
	r.Storage = filepath.Join(dir, "data")
	if err := os.WriteFile(config, []byte(registryConfig(r.Host, r.Storage, htpasswd)), 0o600); err != nil {
		t.Fatal(err)
	}
	if r.proc, err = startProcess("registry", bin, []string{"serve", config}, dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.proc.stop(10 * time.Second) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.waitReady(ctx); err != nil {
		t.Fatalf("the registry did not become ready: %v; last lines of its log:\n%s", err, tail(r.proc.logPath, 30))
	}
	return r
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
