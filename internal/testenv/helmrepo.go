package testenv

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/repo"
	"sigs.k8s.io/yaml"
)

// HelmRepository is a static Helm chart repository as teams host them: a
// folder of chart archives and the index.yaml helm writes for them,
// served by net/http's file server (ETag-less, Last-Modified and
// If-Modified-Since) on a loopback port, optionally over TLS and behind
// basic auth. It counts the requests it answers.
type HelmRepository struct {
	// URL is the repository's URL (http:// or https://).
	URL string
	// Username and Password are the one account it accepts; empty when
	// it reads anonymously.
	Username, Password string

	dir string
	srv *httptest.Server

	mu       sync.Mutex
	answered map[string]int // "<METHOD> <path> <status>" → count
	indexed  int            // indexes written, each dated a second after the last
}

// HelmRepositoryOptions shape a HelmRepository.
type HelmRepositoryOptions struct {
	// TLS serves HTTPS with a certificate that Client trusts.
	TLS bool
	// Username and Password, when set, are required (basic auth).
	Username, Password string
	// ForbidMissing answers 403 for a file it does not have, as a
	// repository served from an S3 or GCS bucket does, rather than 404.
	ForbidMissing bool
}

// StartHelmRepository starts a repository for a test, stopped when the
// test ends.
func StartHelmRepository(t testing.TB, opts HelmRepositoryOptions) *HelmRepository {
	t.Helper()
	r := &HelmRepository{dir: t.TempDir(), Username: opts.Username, Password: opts.Password, answered: map[string]int{}}
	files := http.FileServer(http.Dir(r.dir))
	handler := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		rec := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		defer func() {
			r.mu.Lock()
			r.answered[fmt.Sprintf("%s %s %d", req.Method, req.URL.Path, rec.status)]++
			r.mu.Unlock()
		}()
		if u, p, _ := req.BasicAuth(); opts.Username != "" && (u != opts.Username || p != opts.Password) {
			rec.WriteHeader(http.StatusUnauthorized)
			return
		}
		if _, err := os.Stat(filepath.Join(r.dir, filepath.FromSlash(path.Clean("/"+req.URL.Path)))); opts.ForbidMissing && err != nil {
			rec.WriteHeader(http.StatusForbidden)
			return
		}
		files.ServeHTTP(rec, req)
	})
	if opts.TLS {
		r.srv = httptest.NewTLSServer(handler)
	} else {
		r.srv = httptest.NewServer(handler)
	}
	t.Cleanup(r.srv.Close)
	r.URL = r.srv.URL + "/charts"
	if err := os.MkdirAll(filepath.Join(r.dir, "charts"), 0o755); err != nil {
		t.Fatal(err)
	}
	return r
}

// Transport trusts the repository's certificate (when it serves TLS).
func (r *HelmRepository) Transport() http.RoundTripper {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	if cert := r.srv.Certificate(); cert != nil {
		pool := x509.NewCertPool()
		pool.AddCert(cert)
		transport.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return transport
}

// Chart packs files (paths inside the chart's folder → content) as the
// archive of chart name at version, with a Chart.yaml unless files holds
// one.
func Chart(t testing.TB, name, version string, files map[string]string) []byte {
	t.Helper()
	packed := map[string]string{}
	for path, content := range files {
		packed[name+"/"+path] = content
	}
	if _, ok := files["Chart.yaml"]; !ok {
		packed[name+"/Chart.yaml"] = fmt.Sprintf("apiVersion: v2\nname: %s\nversion: %s\n", name, version)
	}
	return TarGz(t, packed)
}

// Publish adds chart name at version (see Chart) to the repository and
// writes its index again with helm's own indexer, as `helm repo index`
// does; it returns the archive's sha256 hex digest.
func (r *HelmRepository) Publish(t testing.TB, name, version string, files map[string]string) string {
	t.Helper()
	return r.PublishArchive(t, name+"-"+version+".tgz", Chart(t, name, version, files))
}

// PublishArchive adds an archive under file and writes the index again.
func (r *HelmRepository) PublishArchive(t testing.TB, file string, archive []byte) string {
	t.Helper()
	dir := filepath.Join(r.dir, "charts")
	if err := os.WriteFile(filepath.Join(dir, file), archive, 0o644); err != nil {
		t.Fatal(err)
	}
	index, err := repo.IndexDirectory(dir, r.URL)
	if err != nil {
		t.Fatalf("indexing the repository: %v", err)
	}
	index.SortEntries()
	data, err := yaml.Marshal(index) // as index.WriteFile does
	if err != nil {
		t.Fatal(err)
	}
	r.WriteIndex(t, data)
	for _, versions := range index.Entries {
		for _, v := range versions {
			if len(v.URLs) > 0 && strings.HasSuffix(v.URLs[0], "/"+file) {
				return v.Digest
			}
		}
	}
	t.Fatalf("the index lists no %s", file)
	return ""
}

// WriteIndex writes index.yaml as given. Its modification time is in the
// past and a second after the last index's, so that a client may trust
// Last-Modified and ask with If-Modified-Since.
func (r *HelmRepository) WriteIndex(t testing.TB, data []byte) {
	t.Helper()
	file := filepath.Join(r.dir, "charts", "index.yaml")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	r.indexed++
	modified := time.Now().Add(-time.Hour).Truncate(time.Second).Add(time.Duration(r.indexed) * time.Second)
	r.mu.Unlock()
	if err := os.Chtimes(file, modified, modified); err != nil {
		t.Fatal(err)
	}
}

// Replace overwrites an archive already indexed, leaving the index (and
// its digest) as it was, as a tampered or broken repository would.
func (r *HelmRepository) Replace(t testing.TB, file string, archive []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(r.dir, "charts", file), archive, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Path is where the repository keeps file (an archive, its .prov), for
// tools that read it from disk.
func (r *HelmRepository) Path(file string) string {
	return filepath.Join(r.dir, "charts", file)
}

// Answered returns the requests answered since the last call, as
// "<METHOD> <path> <status>" → count, and starts counting again.
func (r *HelmRepository) Answered() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	got := r.answered
	r.answered = map[string]int{}
	return got
}

// Stop stops serving (an outage); the repository's URL then refuses
// connections.
func (r *HelmRepository) Stop() { r.srv.Close() }

// statusWriter records the status a handler answered.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}
