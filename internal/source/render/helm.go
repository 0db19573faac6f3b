package render

import (
	"context"
	"fmt"
	"path"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"

	"github.com/plumb-dev/plumb/internal/source/manifest"
	"github.com/plumb-dev/plumb/internal/source/tree"
)

// renderHelm renders the chart in dir in-process: no cluster client (so
// `lookup` finds nothing), no DNS, no dependency download (the Read phase
// has put the dependencies under charts/ before). CRDs in crds/ are included; NOTES.txt is not.
func renderHelm(ctx context.Context, t *tree.Tree, dir string, opts HelmOptions) ([]manifest.Object, error) {
	fail := func(err error) error { return &Error{Engine: Helm, Path: dir, Err: err} }
	files, err := t.Files(dir)
	if err != nil {
		return nil, err
	}
	buffered := make([]*loader.BufferedFile, 0, len(files))
	err = readFiles(ctx, t, files, func(file string, data []byte) error {
		rel := strings.TrimPrefix(strings.TrimPrefix(file, dir), "/")
		buffered = append(buffered, &loader.BufferedFile{Name: rel, Data: data})
		return nil
	})
	if err != nil {
		return nil, err
	}
	chrt, err := loader.LoadFiles(buffered)
	if err != nil {
		return nil, fail(err)
	}
	if err := vendoredDependencies(chrt); err != nil {
		return nil, fail(err)
	}

	values := map[string]any{}
	for _, file := range opts.ValuesFiles {
		data, err := t.ReadFile(file)
		if err != nil {
			return nil, fail(fmt.Errorf("values file: %w", err))
		}
		fileValues, err := chartutil.ReadValues(data)
		if err != nil {
			return nil, fail(fmt.Errorf("values file %s: %w", file, err))
		}
		mergeValues(values, fileValues)
	}
	mergeValues(values, opts.Values)

	if err := chartutil.ProcessDependenciesWithMerge(chrt, values); err != nil {
		return nil, fail(err)
	}
	release := chartutil.ReleaseOptions{Name: opts.ReleaseName, Namespace: opts.Namespace, Revision: 1, IsInstall: true}
	caps := chartutil.DefaultCapabilities.Copy()
	if opts.KubeVersion != "" {
		kubeVersion, err := chartutil.ParseKubeVersion(opts.KubeVersion)
		if err != nil {
			return nil, fail(fmt.Errorf("the cluster's Kubernetes version %q: %w", opts.KubeVersion, err))
		}
		caps.KubeVersion = *kubeVersion
	}
	if len(opts.APIVersions) > 0 {
		caps.APIVersions = chartutil.VersionSet(opts.APIVersions)
	}
	renderValues, err := chartutil.ToRenderValues(chrt, values, release, caps)
	if err != nil {
		return nil, fail(err)
	}
	rendered, err := engine.Engine{}.Render(chrt, renderValues)
	if err != nil {
		return nil, fail(err)
	}

	var objects []manifest.Object
	for _, crd := range chrt.CRDObjects() {
		objs, err := manifest.Parse("helm "+path.Join(dir, crd.Filename), crd.File.Data)
		if err != nil {
			return nil, err
		}
		objects = append(objects, objs...)
	}
	names := make([]string, 0, len(rendered))
	for name := range rendered {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		base := path.Base(name)
		if strings.HasPrefix(base, "_") || strings.EqualFold(base, "NOTES.txt") || strings.TrimSpace(rendered[name]) == "" {
			continue
		}
		// Template names start with the chart's name; show the repository path.
		_, inChart, _ := strings.Cut(name, "/")
		objs, err := manifest.Parse("helm "+path.Join(dir, inChart), []byte(rendered[name]))
		if err != nil {
			return nil, err
		}
		objects = append(objects, objs...)
	}
	return objects, nil
}

// vendoredDependencies fails when Chart.yaml lists a dependency that is not
// in charts/ (the Read phase fetched those with a repository). As Helm's
// install and template do, only the chart's own are checked: Helm leaves
// out a subchart's dependency that is missing.
func vendoredDependencies(c *chart.Chart) error {
	have := map[string]bool{}
	for _, dep := range c.Dependencies() {
		have[dep.Name()] = true
	}
	for _, dep := range c.Metadata.Dependencies {
		if !have[dep.Name] {
			return fmt.Errorf("dependency %q is not in charts/: vendor it there or give its repository", dep.Name)
		}
	}
	return nil
}

// mergeValues merges src into dst: maps merge key by key, anything else in
// src replaces what dst has. Maps are copied, never shared, because Helm
// changes the values it renders with.
func mergeValues(dst, src map[string]any) {
	for key, value := range src {
		if srcMap, ok := value.(map[string]any); ok {
			dstMap, ok := dst[key].(map[string]any)
			if !ok {
				dstMap = map[string]any{}
				dst[key] = dstMap
			}
			mergeValues(dstMap, srcMap)
			continue
		}
		dst[key] = value
	}
}
