package render

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"

	"go.yaml.in/yaml/v3"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/plumb-dev/plumb/source/manifest"
	"github.com/plumb-dev/plumb/source/tree"
)

// kustomizationNames are the file names kustomize recognises, in its order.
var kustomizationNames = []string{"kustomization.yaml", "kustomization.yml", "Kustomization"}

// ErrNotInRepository means a kustomization refers to something that is not
// a file or folder of the repository (a URL, a remote Git base, a missing
// path): plumb renders from the repository alone.
var ErrNotInRepository = errors.New("not a file or folder in the repository (remote resources are disabled: vendor them into the repository)")

// renderKustomize builds the kustomization in dir on an in-memory copy of
// the repository. Plugins (exec and container functions) and Helm inflation
// are off, and loading is restricted to the kustomization's root. Before the
// build starts, every path that any kustomization it reaches names must be
// a file or folder of the repository, spelled so that kustomize cannot take
// it for a URL or a remote Git base: kustomize's loader then never clones,
// never makes an HTTP request and never creates a temporary folder.
func renderKustomize(ctx context.Context, t *tree.Tree, dir string) ([]manifest.Object, error) {
	if err := onlyRepositoryPaths(t, dir, map[string]bool{}); err != nil {
		return nil, &Error{Engine: Kustomize, Path: dir, Err: err}
	}
	fs, err := inMemory(ctx, t)
	if err != nil {
		return nil, err
	}
	opts := krusty.MakeDefaultOptions() // root-only loading, plugins disabled
	opts.PluginConfig = types.DisabledPluginConfig()
	opts.LoadRestrictions = types.LoadRestrictionsRootOnly
	resources, err := krusty.MakeKustomizer(opts).Run(fs, "/"+dir)
	if err != nil {
		return nil, &Error{Engine: Kustomize, Path: dir, Err: err}
	}
	var objects []manifest.Object
	for _, r := range resources.Resources() {
		out, err := r.AsYAML()
		if err != nil {
			return nil, &Error{Engine: Kustomize, Path: dir, Err: err}
		}
		objs, err := manifest.Parse("kustomize build "+displayDir(dir), out)
		if err != nil {
			return nil, err
		}
		for i := range objs {
			objs[i].Source.Line = 0 // a line of kustomize's output means nothing to a reader
		}
		objects = append(objects, objs...)
	}
	return objects, nil
}

// inMemory copies every file of the tree (symlinks resolved) into an
// in-memory file system rooted at "/".
func inMemory(ctx context.Context, t *tree.Tree) (filesys.FileSystem, error) {
	files, err := t.Files("")
	if err != nil {
		return nil, err
	}
	fs := filesys.MakeFsInMemory()
	err = readFiles(ctx, t, files, func(file string, data []byte) error {
		if err := fs.WriteFile("/"+file, data); err != nil {
			return fmt.Errorf("copying %s for kustomize: %w", file, err)
		}
		return nil
	})
	return fs, err
}

// kustomizationPathFields are the fields of a kustomization whose values are
// paths that kustomize would load, possibly from a URL.
var kustomizationPathFields = []string{"resources", "bases", "components", "crds", "configurations", "patchesStrategicMerge", "generators", "transformers", "validators"}

// onlyRepositoryPaths walks the kustomization in dir and every local base it
// reaches, and fails on any reference that is not a path in the repository.
func onlyRepositoryPaths(t *tree.Tree, dir string, seen map[string]bool) error {
	if seen[dir] {
		return nil
	}
	seen[dir] = true
	file := ""
	for _, name := range kustomizationNames {
		if candidate := path.Join(dir, name); t.Exists(candidate) {
			file = candidate
			break
		}
	}
	if file == "" {
		return nil // a plain folder used as a resource
	}
	data, err := t.ReadFile(file)
	if err != nil {
		return err
	}
	var k map[string]any
	if err := yaml.Unmarshal(data, &k); err != nil {
		return &manifest.Error{Source: manifest.Source{File: file}, Reason: "invalid kustomization: " + err.Error()}
	}
	if _, ok := k["helmCharts"]; ok {
		return fmt.Errorf("%s: helmCharts is not supported: point the App at the chart folder instead", file)
	}
	var refs []string
	for _, field := range kustomizationPathFields {
		refs = append(refs, stringsOf(k[field])...)
	}
	for _, field := range []string{"patches", "patchesJson6902", "replacements"} {
		for _, item := range listOf(k[field]) {
			if m, ok := item.(map[string]any); ok {
				refs = append(refs, stringsOf(m["path"])...)
			}
		}
	}
	for _, field := range []string{"configMapGenerator", "secretGenerator"} {
		for _, item := range listOf(k[field]) {
			if m, ok := item.(map[string]any); ok {
				for _, file := range stringsOf(m["files"]) {
					// A generator file may be written key=path.
					if _, p, ok := strings.Cut(file, "="); ok {
						file = p
					}
					refs = append(refs, file)
				}
				refs = append(refs, stringsOf(m["envs"])...)
				refs = append(refs, stringsOf(m["env"])...)
			}
		}
	}
	if openapi, ok := k["openapi"].(map[string]any); ok {
		refs = append(refs, stringsOf(openapi["path"])...)
	}
	for _, ref := range refs {
		local, err := repositoryPath(t, dir, ref)
		if err != nil {
			return fmt.Errorf("%s refers to %q: %w", file, ref, err)
		}
		if t.IsDir(local) {
			if err := onlyRepositoryPaths(t, local, seen); err != nil {
				return err
			}
		}
	}
	return nil
}

// repositoryPath returns the repository path that ref, relative to dir,
// names, when it is one: a relative path of the repository that exists, in
// which kustomize sees no URL or Git repository (no scheme, no ':', '@' or
// '?', no github.com host). Anything else fails with ErrNotInRepository.
func repositoryPath(t *tree.Tree, dir, ref string) (string, error) {
	first, _, _ := strings.Cut(ref, "/")
	if ref == "" || strings.HasPrefix(ref, "/") || strings.ContainsAny(ref, ":@?\\\x00") ||
		strings.EqualFold(first, "github.com") {
		return "", ErrNotInRepository
	}
	local := strings.TrimPrefix(path.Clean("/"+path.Join(dir, ref)), "/")
	if strings.HasPrefix(path.Clean(path.Join(dir, ref)), "..") || !t.Exists(local) {
		return "", ErrNotInRepository
	}
	return local, nil
}

func listOf(v any) []any {
	l, _ := v.([]any)
	return l
}

func stringsOf(v any) []string {
	switch t := v.(type) {
	case string:
		return []string{t}
	case []any:
		var out []string
		for _, item := range t {
			if s, ok := item.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}
