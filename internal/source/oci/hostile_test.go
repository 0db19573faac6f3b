package oci_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/plumb-dev/plumb/internal/source/oci"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// hostileRegistry is a real HTTP server that speaks enough of the registry
// protocol to attack a client: tag lists that never end, a manifest of
// 8 MiB, a manifest that redirects to another host, and an artifact whose
// blob it sends to a storage host, as real registries do. It asks for a
// basic account, which only it may see.
type hostileRegistry struct {
	*httptest.Server
	storage *httptest.Server

	mu               sync.Mutex
	tagPages         int    // pages of tags served
	storageRequests  int    // requests the storage host received
	storageSawAuth   bool   // the storage host was sent an Authorization header
	otherHostReached bool   // the host a manifest redirected to was reached
	artifactDigest   string // the digest of the artifact served as v1
}

// startHostileRegistry starts it (over HTTPS with useTLS, its storage host
// too; the Client must then trust h.Client()'s transport).
func startHostileRegistry(t *testing.T, artifact v1.Image, useTLS bool) *hostileRegistry {
	t.Helper()
	h := &hostileRegistry{}
	manifest, err := artifact.RawManifest()
	if err != nil {
		t.Fatal(err)
	}
	digest, err := artifact.Digest()
	if err != nil {
		t.Fatal(err)
	}
	h.artifactDigest = digest.String()
	layers, err := artifact.Layers()
	if err != nil {
		t.Fatal(err)
	}
	blobs := map[string][]byte{}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		rc, err := l.Compressed()
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(rc)
		if err != nil {
			t.Fatal(err)
		}
		rc.Close()
		blobs[d.String()] = data
	}

	h.storage = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.storageRequests++
		if r.Header.Get("Authorization") != "" {
			h.storageSawAuth = true
		}
		h.mu.Unlock()
		data, ok := blobs[strings.TrimPrefix(r.URL.Path, "/")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(data)
	}))
	start(h.storage, useTLS)
	t.Cleanup(h.storage.Close)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.otherHostReached = true
		h.mu.Unlock()
		http.NotFound(w, r)
	}))
	t.Cleanup(other.Close)

	mux := http.NewServeMux()
	mux.HandleFunc("/v2/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v2/" {
			http.NotFound(w, r)
			return
		}
		if _, _, ok := r.BasicAuth(); !ok {
			w.Header().Set("WWW-Authenticate", `Basic realm="hostile"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
	})
	// Every page links to one more, for ever.
	mux.HandleFunc("/v2/endless/tags/list", func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.tagPages++
		page := h.tagPages
		h.mu.Unlock()
		w.Header().Set("Link", fmt.Sprintf(`</v2/endless/tags/list?n=1000&last=p%d>; rel="next"`, page))
		fmt.Fprintf(w, `{"name":"endless","tags":["p%d-a","p%d-b"]}`, page, page)
	})
	// One page of more tags than a listing may hold.
	mux.HandleFunc("/v2/crowded/tags/list", func(w http.ResponseWriter, r *http.Request) {
		tags := make([]string, 60_000)
		for i := range tags {
			tags[i] = fmt.Sprintf("%q", fmt.Sprintf("1.0.%d", i))
		}
		fmt.Fprintf(w, `{"name":"crowded","tags":[%s]}`, strings.Join(tags, ","))
	})
	// One page of a single tag of 1 MiB (every page within its bound).
	mux.HandleFunc("/v2/longtag/tags/list", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"name":"longtag","tags":["1.0.0","1.0.1-%s"]}`, strings.Repeat("x", 1<<20))
	})
	// One page of 8 MiB.
	mux.HandleFunc("/v2/bulky/tags/list", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"name":"bulky","tags":["%s"]}`, strings.Repeat("x", 8<<20))
	})
	mux.HandleFunc("/v2/attack/manifests/", func(w http.ResponseWriter, r *http.Request) {
		ref := strings.TrimPrefix(r.URL.Path, "/v2/attack/manifests/")
		switch {
		case ref == "elsewhere":
			http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
		case ref == "huge" || ref == "sha256:"+strings.Repeat("a", 64):
			w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
			w.Header().Set("Docker-Content-Digest", "sha256:"+strings.Repeat("a", 64))
			if r.Method == http.MethodHead {
				w.Header().Set("Content-Length", "512")
				return
			}
			_, _ = w.Write([]byte(`{"schemaVersion":2,"layers":[` + strings.Repeat(" ", 8<<20) + `]}`))
		case ref == "sha256-"+strings.TrimPrefix(h.artifactDigest, "sha256:")+".sig":
			// A signature image whose cosign layers have no digest, or
			// one of another algorithm.
			sig := `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",` +
				`"config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:` + strings.Repeat("b", 64) + `","size":2},` +
				`"layers":[{"mediaType":"` + oci.MediaTypeCosignSignature + `","size":10},` +
				`{"mediaType":"` + oci.MediaTypeCosignSignature + `","size":10,"digest":"sha512:` + strings.Repeat("c", 128) + `",` +
				`"annotations":{"dev.cosignproject.cosign/signature":"AAAA"}}]}`
			w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
			w.Header().Set("Content-Length", fmt.Sprint(len(sig)))
			if r.Method != http.MethodHead {
				_, _ = w.Write([]byte(sig))
			}
		case ref == "v1" || ref == h.artifactDigest:
			w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
			w.Header().Set("Docker-Content-Digest", h.artifactDigest)
			w.Header().Set("Content-Length", fmt.Sprint(len(manifest)))
			if r.Method != http.MethodHead {
				_, _ = w.Write(manifest)
			}
		default:
			http.NotFound(w, r)
		}
	})
	// Blobs live on the storage host.
	mux.HandleFunc("/v2/attack/blobs/", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, h.storage.URL+"/"+strings.TrimPrefix(r.URL.Path, "/v2/attack/blobs/"), http.StatusTemporaryRedirect)
	})
	h.Server = httptest.NewUnstartedServer(mux)
	start(h.Server, useTLS)
	t.Cleanup(h.Close)
	return h
}

func start(s *httptest.Server, useTLS bool) {
	if useTLS {
		s.StartTLS()
	} else {
		s.Start()
	}
}

func (h *hostileRegistry) url(repo string) string {
	return oci.Scheme + strings.TrimPrefix(strings.TrimPrefix(h.URL, "http://"), "https://") + "/" + repo
}

// A hostile registry gets ErrLimitExceeded, and costs bounded requests
// and memory: an endless tag list stops at the page bound, a crowded or
// bulky page or an overlong tag at its bounds, a huge manifest at 4 MiB, and a manifest
// request that is sent to another host never reaches it. A blob may still
// be fetched from a storage host, without the registry's credentials.
func TestAHostileRegistryGetsLimitExceeded(t *testing.T) {
	files := map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n"}
	h := startHostileRegistry(t, testenv.Artifact(t, testenv.TarGz(t, files), oci.MediaTypeFluxContent), false)
	c := &oci.Client{AllowHTTP: true}
	auth := oci.Auth{Username: "tenant", Password: "s3cret-password"}
	ctx := context.Background()

	for _, tc := range []struct {
		name, repo string
		ref        oci.Ref
		want       string
	}{
		{"an endless tag list", "endless", oci.Ref{SemVer: ">=1.0.0"}, "pages"},
		{"a page of too many tags", "crowded", oci.Ref{SemVer: ">=1.0.0"}, "more than 50000"},
		{"a page of 8 MiB", "bulky", oci.Ref{SemVer: ">=1.0.0"}, "a page of tags of more than"},
		{"a tag of 1 MiB", "longtag", oci.Ref{SemVer: ">=1.0.0"}, "hold a tag of 1048582 bytes, more than 128"},
		{"a manifest sent to another host", "attack", oci.Ref{Tag: "elsewhere"}, "another host"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Resolve(ctx, h.url(tc.repo), tc.ref, auth)
			if !errors.Is(err, oci.ErrLimitExceeded) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrLimitExceeded (%s)", err, tc.want)
			}
			if strings.Contains(err.Error(), auth.Password) {
				t.Errorf("the error shows the password: %v", err)
			}
		})
	}
	h.mu.Lock()
	pages, reached := h.tagPages, h.otherHostReached
	h.mu.Unlock()
	if pages == 0 || pages > 200 {
		t.Errorf("the endless list was read for %d pages, want between 1 and the bound of 200", pages)
	}
	if reached {
		t.Error("a manifest request reached the host the registry redirected it to")
	}

	rev, err := c.Resolve(ctx, h.url("attack"), oci.Ref{Tag: "huge"}, auth)
	if err != nil {
		t.Fatalf("the huge manifest's HEAD: %v", err)
	}
	if _, err := c.Pull(ctx, h.url("attack"), rev, auth, "", generous); !errors.Is(err, oci.ErrLimitExceeded) {
		t.Errorf("a manifest of 8 MiB: %v, want ErrLimitExceeded", err)
	}

	rev, err = c.Resolve(ctx, h.url("attack"), oci.Ref{Tag: "v1"}, auth)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Pull(ctx, h.url("attack"), rev, auth, "", generous)
	if err != nil {
		t.Fatalf("an artifact whose blob is on a storage host: %v", err)
	}
	if data, err := got.ReadFile("cm.yaml"); err != nil || string(data) != files["cm.yaml"] {
		t.Errorf("cm.yaml: %q, %v", data, err)
	}
	// Signature layers without a sha256 digest are refused, not followed.
	keys, err := oci.ParsePublicKeys(map[string][]byte{"cosign.pub": testenv.GenerateCosignKey(t).Public})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.VerifyCosign(ctx, h.url("attack"), rev, auth, keys); !errors.Is(err, oci.ErrNotVerified) || !strings.Contains(err.Error(), "no sha256 digest") {
		t.Errorf("signature layers without a digest: %v, want %v saying so", err, oci.ErrNotVerified)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.storageRequests != 1 || h.storageSawAuth {
		t.Errorf("the storage host got %d requests (want 1), an Authorization header: %t (want none)", h.storageRequests, h.storageSawAuth)
	}
}

// An HTTPS registry on a loopback (or private) address is read over HTTPS,
// though go-containerregistry picks plain HTTP for such hosts; a blob on
// its storage host too.
func TestAnHTTPSRegistryOnALoopbackAddressIsReadOverHTTPS(t *testing.T) {
	files := map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n"}
	h := startHostileRegistry(t, testenv.Artifact(t, testenv.TarGz(t, files), oci.MediaTypeFluxContent), true)
	c := &oci.Client{Transport: h.Client().Transport} // trusts the test servers' certificate
	auth := oci.Auth{Username: "tenant", Password: "s3cret-password"}
	ctx := context.Background()
	rev, err := c.Resolve(ctx, h.url("attack"), oci.Ref{Tag: "v1"}, auth)
	if err != nil {
		t.Fatalf("resolving over HTTPS: %v", err)
	}
	got, err := c.Pull(ctx, h.url("attack"), rev, auth, "", generous)
	if err != nil {
		t.Fatalf("pulling over HTTPS: %v", err)
	}
	if data, err := got.ReadFile("cm.yaml"); err != nil || string(data) != files["cm.yaml"] {
		t.Errorf("cm.yaml: %q, %v", data, err)
	}
}
