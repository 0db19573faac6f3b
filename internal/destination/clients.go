package destination

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// Clients are the clients of one destination cluster, over one HTTP
// client (and so the connection's dialer): what the controller and the
// dashboard's previews both act and observe with.
type Clients struct {
	Mapper    meta.RESTMapper
	Direct    client.Client
	Dynamic   dynamic.Interface
	Discovery discovery.DiscoveryInterface
}

// NewClients makes the clients of the cluster cfg reaches; the mapper
// discovers its kinds lazily.
func NewClients(cfg *rest.Config, scheme *runtime.Scheme) (*Clients, error) {
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("discovering its kinds: %w", err)
	}
	direct, err := client.New(cfg, client.Options{Scheme: scheme, Mapper: mapper, HTTPClient: httpClient})
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	disco, err := discovery.NewDiscoveryClientForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	return &Clients{Mapper: mapper, Direct: direct, Dynamic: dyn, Discovery: disco}, nil
}
