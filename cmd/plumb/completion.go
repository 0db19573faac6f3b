package main

import (
	"context"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

// Shell completion: cobra's `plumb completion bash|zsh|fish|powershell`
// scripts call these for App names, namespaces and contexts, read with
// the user's own kubeconfig (nothing is offered on an error).

// completeApps offers the names of the Apps in the namespace, for a
// command's first argument.
func (f *clusterFlags) completeApps(cmd *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	c, err := f.appsClient()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ns, err := f.namespace()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	list := &plumbv1.AppList{}
	if err := c.List(contextOf(cmd), list, client.InNamespace(ns)); err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	names := make([]string, 0, len(list.Items))
	for _, app := range list.Items {
		names = append(names, app.Name)
	}
	return withPrefix(names, prefix), cobra.ShellCompDirectiveNoFileComp
}

func (f *clusterFlags) completeNamespaces(cmd *cobra.Command, _ []string, prefix string) ([]string, cobra.ShellCompDirective) {
	c, err := f.appsClient()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	list := &corev1.NamespaceList{}
	if err := c.List(contextOf(cmd), list); err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	names := make([]string, 0, len(list.Items))
	for _, ns := range list.Items {
		names = append(names, ns.Name)
	}
	return withPrefix(names, prefix), cobra.ShellCompDirectiveNoFileComp
}

func (f *clusterFlags) completeContexts(_ *cobra.Command, _ []string, prefix string) ([]string, cobra.ShellCompDirective) {
	raw, err := f.config.ToRawKubeConfigLoader().RawConfig()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	names := make([]string, 0, len(raw.Contexts))
	for name := range raw.Contexts {
		names = append(names, name)
	}
	return withPrefix(names, prefix), cobra.ShellCompDirectiveNoFileComp
}

// withPrefix is the names that start with prefix, sorted.
func withPrefix(names []string, prefix string) []string {
	var out []string
	for _, name := range names {
		if strings.HasPrefix(name, prefix) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// contextOf is the command's context (cobra's is nil outside Execute).
func contextOf(cmd *cobra.Command) context.Context {
	if ctx := cmd.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}
