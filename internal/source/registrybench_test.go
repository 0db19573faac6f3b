package source_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/plumb-dev/plumb/internal/source"
	"github.com/plumb-dev/plumb/internal/source/oci"
	"github.com/plumb-dev/plumb/internal/source/render"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// A round of unchanged ticks, as the registry benchmarks count it: 20
// OCI Apps with semver ranges over one repository's tags and 20 Helm Apps
// of one HTTP repository tick once each, within 30 seconds of each other,
// and the next round comes an interval (3 minutes) later.
const (
	roundApps     = 20
	roundInterval = 3 * time.Minute
)

// countingTransport counts the requests sent through it and the bytes of
// their answers' bodies.
type countingTransport struct {
	requests, bytes atomic.Int64
}

func (c *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c.requests.Add(1)
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err == nil {
		resp.Body = &countedBody{ReadCloser: resp.Body, n: &c.bytes}
	}
	return resp, err
}

type countedBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// registryWorld is a registry with a repository of 30 tags and a Helm
// repository whose index lists 100 versions of a chart.
type registryWorld struct {
	registry *testenv.Registry
	helm     *testenv.HelmRepository
}

func newRegistryWorld(b *testing.B) registryWorld {
	b.Helper()
	w := registryWorld{registry: testenv.StartRegistry(b), helm: testenv.StartHelmRepository(b, testenv.HelmRepositoryOptions{})}
	for i := range 30 {
		w.registry.PushFiles(b, "bench/app", fmt.Sprintf("1.%d.0", i), map[string]string{"a.yaml": configMap("a", fmt.Sprint(i))})
	}
	for i := range 100 {
		w.helm.Publish(b, "web", fmt.Sprintf("1.%d.0", i), map[string]string{"templates/cm.yaml": configMap("web", fmt.Sprint(i))})
	}
	return w
}

// ranges are the OCI Apps' semver ranges, all holding the highest tag.
var ranges = []string{"1.x", ">=1.0.0", "^1.2.0", "~1.29.0", ">=1.20.0 <2.0.0"}

// reportPerRound gives the figures per round.
func reportPerRound(b *testing.B, counted *countingTransport, rounds int) {
	b.ReportMetric(float64(counted.requests.Load())/float64(rounds), "requests/round")
	b.ReportMetric(float64(counted.bytes.Load())/float64(rounds), "answer-bytes/round")
}

// BenchmarkRegistryRequestsPerRound is plumb's Reader through rounds of
// unchanged ticks: the OCI Apps share one tag listing per round (kept 30
// seconds per repository and account) and each makes one manifest HEAD;
// the Helm Apps share one conditional GET of the index (a 304).
func BenchmarkRegistryRequestsPerRound(b *testing.B) {
	w := newRegistryWorld(b)
	counted := &countingTransport{}
	clock := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	r, err := source.NewReader(source.Options{CacheDir: b.TempDir(), Limits: source.DefaultLimits(), RefsTTL: -1,
		RegistryTransport: counted, AllowInsecureRegistries: true, Now: func() time.Time { return clock }})
	if err != nil {
		b.Fatal(err)
	}
	account := oci.Auth{Username: w.registry.Username, Password: w.registry.Password}
	var requests []source.Request
	for i := range roundApps {
		requests = append(requests,
			source.Request{OCI: &source.OCIRequest{URL: w.registry.URL("bench/app"), Ref: oci.Ref{SemVer: ranges[i%len(ranges)]}, Auth: account, Insecure: true}},
			source.Request{Path: "web", Render: render.Options{Helm: render.HelmOptions{ReleaseName: "web", Namespace: "default"}},
				Helm: &source.HelmRequest{Repository: w.helm.URL, Chart: "web", Version: ranges[i%len(ranges)]}})
	}
	ctx := context.Background()
	round := func() {
		for _, req := range requests {
			res, err := r.Read(ctx, req)
			if err != nil {
				b.Fatal(err)
			}
			if res.Revision.Name != "1.29.0" && res.Revision.Name != "1.99.0" {
				b.Fatalf("read %s, want the highest version", res.Revision)
			}
		}
		clock = clock.Add(roundInterval)
	}
	round() // the first round downloads and renders
	counted.requests.Store(0)
	counted.bytes.Store(0)
	rounds := 0
	for b.Loop() {
		round()
		rounds++
	}
	reportPerRound(b, counted, rounds)
}

// BenchmarkBaselineFluxStyleRegistryRequestsPerRound is the same rounds as
// Flux's source-controller makes them: each OCIRepository lists its
// repository's tags and HEADs the manifest of the highest in range on its
// own (nothing is shared between OCIRepositories), and the one shared
// HelmRepository downloads its whole index every interval.
func BenchmarkBaselineFluxStyleRegistryRequestsPerRound(b *testing.B) {
	w := newRegistryWorld(b)
	counted := &countingTransport{}
	repo, err := name.NewRepository(w.registry.Host+"/bench/app", name.Insecure)
	if err != nil {
		b.Fatal(err)
	}
	opts := []remote.Option{remote.WithTransport(counted),
		remote.WithAuth(&authn.Basic{Username: w.registry.Username, Password: w.registry.Password})}
	ctx := context.Background()
	round := func() {
		for range roundApps {
			// One client per OCIRepository's reconcile, its one auth
			// handshake shared by the listing and the HEAD: the fewest
			// requests such a reconcile can make.
			puller, err := remote.NewPuller(opts...)
			if err != nil {
				b.Fatal(err)
			}
			tags, err := puller.List(ctx, repo)
			if err != nil || len(tags) != 30 {
				b.Fatalf("listing the tags: %d, %v", len(tags), err)
			}
			if _, err := puller.Head(ctx, repo.Tag("1.29.0")); err != nil {
				b.Fatal(err)
			}
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.helm.URL+"/index.yaml", nil)
		if err != nil {
			b.Fatal(err)
		}
		resp, err := counted.RoundTrip(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("the index: %v %v", resp, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	rounds := 0
	for b.Loop() {
		round()
		rounds++
	}
	reportPerRound(b, counted, rounds)
}
