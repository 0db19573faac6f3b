package destination

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/plumb-dev/plumb/internal/egress"
)

// ErrInvalidKubeConfig is wrapped by the errors of a kubeconfig that cannot
// be used: it is not one, names no usable context, refers to files, or
// asks for a plugin that is not allowed.
var ErrInvalidKubeConfig = errors.New("invalid kubeconfig")

// ParseOptions say what a kubeconfig may ask for.
type ParseOptions struct {
	// AllowPlugins lets a kubeconfig's user run an exec credential plugin
	// or an auth-provider: a command or a provider the controller runs on
	// a tenant's behalf.
	AllowPlugins bool
	// Blocked are the address ranges the API server may not be at (none
	// when empty): checked on the address dialled, after DNS. A proxy of
	// the environment (HTTPS_PROXY) is what is dialled when one is set.
	Blocked []netip.Prefix
}

// dialTimeout bounds a connection's dial to its API server.
const dialTimeout = 30 * time.Second

// Parse makes the client config of a self-contained kubeconfig's current
// context (or of its only context, when none is current), and returns the
// API server's URL. It refuses file references (certificate-authority,
// client-certificate, client-key, tokenFile): they would be read from the
// controller's own disk. Its errors never quote the kubeconfig, which
// holds credentials.
func Parse(data []byte, opts ParseOptions) (*rest.Config, string, error) {
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidKubeConfig, fmt.Sprintf(format, args...))
	}
	if len(strings.TrimSpace(string(data))) == 0 {
		return nil, "", invalid("it is empty")
	}
	config, err := clientcmd.Load(data)
	if err != nil {
		// The decoder's message may quote the document, credentials and all.
		return nil, "", invalid("it is not a kubeconfig (YAML or JSON of kind Config)")
	}
	contextName := config.CurrentContext
	if contextName == "" {
		if len(config.Contexts) != 1 {
			return nil, "", invalid("it has no current-context, and %d contexts to choose from", len(config.Contexts))
		}
		for name := range config.Contexts {
			contextName = name
		}
	}
	kubeContext, ok := config.Contexts[contextName]
	if !ok || kubeContext == nil {
		return nil, "", invalid("its current-context %q is not among its contexts", contextName)
	}
	cluster, ok := config.Clusters[kubeContext.Cluster]
	if !ok || cluster == nil {
		return nil, "", invalid("context %q names cluster %q, which it does not hold", contextName, kubeContext.Cluster)
	}
	user := config.AuthInfos[kubeContext.AuthInfo]
	if kubeContext.AuthInfo != "" && user == nil {
		return nil, "", invalid("context %q names user %q, which it does not hold", contextName, kubeContext.AuthInfo)
	}
	if err := refuseFiles(cluster, user); err != nil {
		return nil, "", invalid("%v", err)
	}
	if user != nil && !opts.AllowPlugins {
		switch {
		case user.Exec != nil:
			return nil, "", invalid("user %q runs an exec credential plugin, which this controller does not allow (start it with --allow-kubeconfig-plugins)", kubeContext.AuthInfo)
		case user.AuthProvider != nil:
			return nil, "", invalid("user %q uses auth-provider %q, which this controller does not allow (start it with --allow-kubeconfig-plugins)", kubeContext.AuthInfo, user.AuthProvider.Name)
		}
	}
	server, err := url.Parse(cluster.Server)
	if err != nil || server.Scheme != "https" || server.Host == "" {
		return nil, "", invalid("cluster %q has no https:// server URL (plain HTTP would send its credentials in clear)", kubeContext.Cluster)
	}
	if cluster.ProxyURL != "" && !opts.AllowPlugins {
		return nil, "", invalid("cluster %q is reached through a proxy (proxy-url), which this controller does not allow (start it with --allow-kubeconfig-plugins)", kubeContext.Cluster)
	}
	server.User = nil // a URL's user part is a credential
	// Only the chosen context, so that the loader finds nothing else to read.
	only := clientcmdapi.NewConfig()
	only.Clusters[kubeContext.Cluster] = cluster
	if user != nil {
		only.AuthInfos[kubeContext.AuthInfo] = user
	}
	only.Contexts[contextName] = kubeContext
	only.CurrentContext = contextName
	restConfig, err := clientcmd.NewNonInteractiveClientConfig(*only, contextName, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
	if err != nil {
		return nil, "", invalid("its context %q cannot be used", contextName)
	}
	if len(opts.Blocked) > 0 {
		restConfig.Dial = egress.NewDialer(opts.Blocked, dialTimeout).DialContext
	}
	return restConfig, server.String(), nil
}

// refuseFiles names the first field of cluster or user that refers to a
// file.
func refuseFiles(cluster *clientcmdapi.Cluster, user *clientcmdapi.AuthInfo) error {
	var fields []string
	if cluster.CertificateAuthority != "" {
		fields = append(fields, "certificate-authority")
	}
	if user != nil {
		for name, value := range map[string]string{"client-certificate": user.ClientCertificate, "client-key": user.ClientKey, "tokenFile": user.TokenFile} {
			if value != "" {
				fields = append(fields, name)
			}
		}
	}
	if len(fields) == 0 {
		return nil
	}
	slices.Sort(fields)
	return fmt.Errorf("it refers to files (%s), which would be read from the controller's disk: inline them (certificate-authority-data, client-certificate-data, client-key-data, token)", strings.Join(fields, ", "))
}
