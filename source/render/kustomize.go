package render

import (
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

// ErrRemoteDisabled means a kustomization refers to something outside the
// repository (a URL or a remote Git base), which plumb does not fetch.
var ErrRemoteDisabled = errors.New("remote resources are disabled: vendor them into the repository")

// renderKustomize builds the kustomization in dir in memory. Plugins (exec
// and container functions) and Helm inflation are off; remote resources are
// refused before the build starts, so kustomize never reaches the network.
func renderKustomize(t *tree.Tree, dir string) ([]manifest.Object, error) {
	if err := refuseRemote(t, dir, map[string]bool{}); err != nil {
		return nil, &Error{Engine: Kustomize, Path: dir, Err: err}
	}
	fs, err := inMemory(t)
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
func inMemory(t *tree.Tree) (filesys.FileSystem, error) {
	files, err := t.Files("")
	if err != nil {
		return nil, err
	}
	fs := filesys.MakeFsInMemory()
	for _, file := range files {
		data, err := t.ReadFile(file)
		if err != nil {
			return nil, err
		}
		if err := fs.WriteFile("/"+file, data); err != nil {
			return nil, fmt.Errorf("copying %s for kustomize: %w", file, err)
		}
	}
	return fs, nil
}

// kustomizationPathFields are the fields of a kustomization whose values are
// paths that kustomize would load, possibly from a URL.
var kustomizationPathFields = []string{"resources", "bases", "components", "crds", "patchesStrategicMerge", "generators", "transformers", "validators"}

// refuseRemote walks the kustomization in dir and every local base it
// reaches, and fails on any remote reference.
func refuseRemote(t *tree.Tree, dir string, seen map[string]bool) error {
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
					if _, p, ok := strings.Cut(file, "="); ok && !isRemote(file) {
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
		if isRemote(ref) {
			return fmt.Errorf("%s refers to %s: %w", file, ref, ErrRemoteDisabled)
		}
		local := path.Join(dir, ref)
		if t.IsDir(local) {
			if err := refuseRemote(t, strings.TrimPrefix(path.Clean("/"+local), "/"), seen); err != nil {
				return err
			}
		}
	}
	return nil
}

// isRemote recognises what kustomize would fetch: URLs, and Git repository
// specs such as github.com/org/repo//path?ref=v1 or git@host:org/repo.
func isRemote(ref string) bool {
	switch {
	case strings.Contains(ref, "://"),
		strings.HasPrefix(ref, "git@"),
		strings.Contains(ref, "?ref=") || strings.Contains(ref, "?version="),
		strings.HasPrefix(ref, "github.com/"), strings.HasPrefix(ref, "gitlab.com/"), strings.HasPrefix(ref, "bitbucket.org/"):
		return true
	}
	return false
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
