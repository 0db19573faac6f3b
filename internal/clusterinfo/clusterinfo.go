// Package clusterinfo tells what the target cluster serves: its Kubernetes
// version and the API versions and kinds it serves, from discovery, cached.
// The Read phase renders Helm charts with them, as `helm template
// --kube-version --api-versions` would, so a chart picks the APIs the
// cluster really has.
package clusterinfo

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
)

// DefaultTTL is how long an answer of discovery is used before it is asked
// again (Invalidate asks at the next use).
const DefaultTTL = 5 * time.Minute

// Discovery caches what discovery says. It is safe for concurrent use.
type Discovery struct {
	client discovery.DiscoveryInterface
	ttl    time.Duration
	now    func() time.Time

	mu          sync.Mutex
	at          time.Time // when the answer below was received; zero: none
	kubeVersion string
	apiVersions []string
}

// New caches client's answers for ttl (DefaultTTL when 0).
func New(client discovery.DiscoveryInterface, ttl time.Duration) *Discovery {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	return &Discovery{client: client, ttl: ttl, now: time.Now}
}

// Capabilities returns the cluster's Kubernetes version (e.g. v1.37.2) and
// the API versions it serves, each as "group/version" and as
// "group/version/Kind" ("v1" and "v1/ConfigMap" for the core group), sorted.
// The slice is shared: do not change it.
func (d *Discovery) Capabilities(ctx context.Context) (string, []string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.at.IsZero() && d.now().Sub(d.at) < d.ttl {
		return d.kubeVersion, d.apiVersions, nil
	}
	if err := ctx.Err(); err != nil {
		return "", nil, err
	}
	info, err := d.client.ServerVersion()
	if err != nil {
		return "", nil, fmt.Errorf("asking the API server for its version: %w", err)
	}
	_, lists, err := d.client.ServerGroupsAndResources()
	var partial *discovery.ErrGroupDiscoveryFailed
	if err != nil && !errors.As(err, &partial) {
		return "", nil, fmt.Errorf("discovering the API server's resources: %w", err)
	}
	seen := map[string]bool{}
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			continue
		}
		seen[gv.String()] = true
		for _, r := range list.APIResources {
			if r.Kind != "" && !strings.Contains(r.Name, "/") { // not a subresource
				seen[gv.String()+"/"+r.Kind] = true
			}
		}
	}
	versions := make([]string, 0, len(seen))
	for v := range seen {
		versions = append(versions, v)
	}
	sort.Strings(versions)
	d.kubeVersion, d.apiVersions, d.at = info.GitVersion, versions, d.now()
	return d.kubeVersion, d.apiVersions, nil
}

// Invalidate makes the next Capabilities ask discovery again (e.g. after a
// CRD was applied or a kind was not found).
func (d *Discovery) Invalidate() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.at = time.Time{}
}
