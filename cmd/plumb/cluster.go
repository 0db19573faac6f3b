package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/appview"
)

// clusterFlags are the kubectl-style flags of the operator's commands:
// which kubeconfig, context and namespace, and whom to act as.
type clusterFlags struct {
	config *genericclioptions.ConfigFlags
}

func newClusterFlags() *clusterFlags {
	f := genericclioptions.NewConfigFlags(true)
	// Only the flags an operator of plumb needs; the rest of kubectl's set
	// is left out of --help.
	f.CacheDir, f.ClusterName, f.AuthInfoName, f.APIServer, f.TLSServerName = nil, nil, nil, nil, nil
	f.Insecure, f.CertFile, f.KeyFile, f.CAFile, f.BearerToken = nil, nil, nil, nil, nil
	f.ImpersonateUID, f.ImpersonateUserExtra, f.Username, f.Password = nil, nil, nil, nil
	f.DisableCompression, f.ProxyURL = nil, nil
	return &clusterFlags{config: f}
}

// addTo adds the flags to cmd (and its subcommands).
func (f *clusterFlags) addTo(cmd *cobra.Command) {
	fs := pflag.NewFlagSet("cluster", pflag.ContinueOnError)
	f.config.AddFlags(fs)
	cmd.PersistentFlags().AddFlagSet(fs)
	_ = cmd.RegisterFlagCompletionFunc("namespace", f.completeNamespaces)
	_ = cmd.RegisterFlagCompletionFunc("context", f.completeContexts)
}

// restConfig is the connection the flags name.
func (f *clusterFlags) restConfig() (*rest.Config, error) {
	cfg, err := f.config.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("no cluster to talk to: %w (pass --kubeconfig or set KUBECONFIG)", err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "plumb-cli"
	return cfg, nil
}

// namespace is -n, or the kubeconfig context's namespace, or "default".
func (f *clusterFlags) namespace() (string, error) {
	ns, _, err := f.config.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return "", fmt.Errorf("reading the namespace from the kubeconfig: %w", err)
	}
	return ns, nil
}

// appsClient is a client for Apps (and the core kinds) that can also
// watch.
func (f *clusterFlags) appsClient() (client.WithWatch, error) {
	cfg, err := f.restConfig()
	if err != nil {
		return nil, err
	}
	scheme := runtime.NewScheme()
	if err := plumbv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", cfg.Host, err)
	}
	return c, nil
}

// app reads the App NAME of the flags' namespace, and returns it with
// the client that read it and its key.
func (f *clusterFlags) app(cmd *cobra.Command, name string) (client.WithWatch, types.NamespacedName, *plumbv1.App, error) {
	c, key, err := f.clientFor(name)
	if err != nil {
		return nil, key, nil, err
	}
	app := &plumbv1.App{}
	if err := c.Get(contextOf(cmd), key, app); err != nil {
		return nil, key, nil, explain(err, key)
	}
	return c, key, app, nil
}

// clientFor is the client and the key of the App NAME, not read.
func (f *clusterFlags) clientFor(name string) (client.WithWatch, types.NamespacedName, error) {
	c, err := f.appsClient()
	if err != nil {
		return nil, types.NamespacedName{}, err
	}
	key, err := f.appKey(name)
	return c, key, err
}

// explainList turns an API error listing Apps into what to do next.
func explainList(err error, namespace string) error {
	switch {
	case apierrors.IsForbidden(err):
		where := "in namespace " + namespace
		if namespace == "" {
			where = "in every namespace (-A); try one namespace with -n"
		}
		return fmt.Errorf("not allowed to list Apps %s: %s: %w", where, apiMessage(err), err)
	case meta.IsNoMatchError(err):
		return errNoCRD
	}
	return err
}

// errNoCRD says what to do when the cluster does not know Apps.
var errNoCRD = errors.New("the cluster does not serve apps.plumb.dev: plumb's CRD is not installed (helm install plumb charts/plumb)")

// appKey is the App NAME in the flags' namespace.
func (f *clusterFlags) appKey(name string) (types.NamespacedName, error) {
	ns, err := f.namespace()
	if err != nil {
		return types.NamespacedName{}, err
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}

// explain turns an API error about the App key into what to do next.
func explain(err error, key types.NamespacedName) error {
	switch {
	case err == nil:
		return nil
	case apierrors.IsNotFound(err):
		return fmt.Errorf("App %s not found in namespace %s (list them with: plumb get apps -n %s, or -A for every namespace)", key.Name, key.Namespace, key.Namespace)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("not allowed: %s (ask for RBAC on apps.plumb.dev in namespace %s)", apiMessage(err), key.Namespace)
	case meta.IsNoMatchError(err):
		return errNoCRD
	}
	return err
}

// apiMessage is the API server's message of an API error.
func apiMessage(err error) string { return appview.APIMessage(err) }
