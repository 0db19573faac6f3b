package render

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/provider"
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
	if _, err := onlyRepositoryPaths(t, dir, map[string]int{}, map[string]bool{}); err != nil {
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

// maxKustomizations bounds how many kustomizations one build may
// accumulate, counting a base once for every path that reaches it (as
// Kustomize builds it again for each): bases that each name the next level
// twice would otherwise make a build of a few files take exponential time.
const maxKustomizations = 1000

// onlyRepositoryPaths walks the kustomization in dir and every local base
// it reaches, decoding each as Kustomize itself does (so that fields match
// whatever their case), and fails on any reference that is not a path in
// the repository, or when the build would accumulate more than
// maxKustomizations kustomizations. It returns how many it would.
func onlyRepositoryPaths(t *tree.Tree, dir string, builds map[string]int, visiting map[string]bool) (int, error) {
	if n, ok := builds[dir]; ok {
		return n, nil
	}
	if visiting[dir] {
		return 0, fmt.Errorf("%s: a kustomization that includes itself", displayDir(dir))
	}
	visiting[dir] = true
	defer delete(visiting, dir)
	file := ""
	for _, name := range kustomizationNames {
		if candidate := path.Join(dir, name); t.Exists(candidate) {
			file = candidate
			break
		}
	}
	if file == "" {
		builds[dir] = 1
		return 1, nil // a plain folder used as a resource
	}
	data, err := t.ReadFile(file)
	if err != nil {
		return 0, err
	}
	var k types.Kustomization
	if err := k.Unmarshal(data); err != nil {
		return 0, &manifest.Error{Source: manifest.Source{File: file}, Reason: "invalid kustomization: " + err.Error()}
	}
	k.FixKustomization()
	if len(k.HelmCharts) > 0 || k.HelmGlobals != nil {
		return 0, fmt.Errorf("%s: helmCharts is not supported: point the App at the chart folder instead", file)
	}
	refs, err := referencedPaths(&k)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", file, err)
	}
	total := 1
	for _, ref := range refs {
		local, err := repositoryPath(t, dir, ref)
		if err != nil {
			return 0, fmt.Errorf("%s refers to %q: %w", file, ref, err)
		}
		if !t.IsDir(local) {
			continue
		}
		n, err := onlyRepositoryPaths(t, local, builds, visiting)
		if err != nil {
			return 0, err
		}
		if total += n; total > maxKustomizations {
			return 0, &tree.LimitError{Limit: "kustomizations in one build", Max: maxKustomizations, Got: int64(total), Path: file}
		}
	}
	builds[dir] = total
	return total, nil
}

// referencedPaths lists every path a kustomization makes Kustomize load.
// Entries of patchesStrategicMerge, generators, transformers and
// validators that Kustomize takes for inline content (it tries that first)
// are content, not paths.
func referencedPaths(k *types.Kustomization) ([]string, error) {
	refs := append([]string(nil), k.Resources...)
	refs = append(refs, k.Components...)
	refs = append(refs, k.Crds...)
	refs = append(refs, k.Configurations...)
	for _, p := range k.PatchesStrategicMerge {
		if !inlineContent(string(p)) {
			refs = append(refs, string(p))
		}
	}
	for _, list := range [][]string{k.Generators, k.Transformers, k.Validators} {
		for _, p := range list {
			if !inlineContent(p) {
				refs = append(refs, p)
			}
		}
	}
	for _, p := range append(append([]types.Patch(nil), k.Patches...), k.PatchesJson6902...) {
		if p.Path != "" {
			refs = append(refs, p.Path)
		}
	}
	for _, r := range k.Replacements {
		if r.Path != "" {
			refs = append(refs, r.Path)
		}
	}
	for _, g := range k.ConfigMapGenerator {
		refs = append(refs, generatorPaths(g.KvPairSources)...)
	}
	for _, g := range k.SecretGenerator {
		refs = append(refs, generatorPaths(g.KvPairSources)...)
	}
	if p, ok := k.OpenAPI["path"]; ok {
		refs = append(refs, p)
	}
	return refs, nil
}

// generatorPaths are the files and env files of a generator ("key=path"
// names a file under a key).
func generatorPaths(kv types.KvPairSources) []string {
	var out []string
	for _, f := range kv.FileSources {
		if _, p, ok := strings.Cut(f, "="); ok {
			f = p
		}
		out = append(out, f)
	}
	out = append(out, kv.EnvSources...)
	if kv.EnvSource != "" {
		out = append(out, kv.EnvSource)
	}
	return out
}

// resources decides, as Kustomize does, whether an entry is inline content.
var resources = provider.NewDefaultDepProvider().GetResourceFactory()

func inlineContent(entry string) bool {
	_, err := resources.SliceFromBytes([]byte(entry))
	return err == nil
}

// repositoryPath returns the repository path that ref, relative to dir,
// names, when it is one: a relative path of the repository that exists,
// written with letters, digits, spaces and ._-+~/ only (so Kustomize sees no
// URL, no scp-like "user@host:" and no query in it), whose first element is
// not github.com (which Kustomize takes for GitHub). Anything else fails
// with ErrNotInRepository.
func repositoryPath(t *tree.Tree, dir, ref string) (string, error) {
	first, _, _ := strings.Cut(ref, "/")
	if ref == "" || strings.HasPrefix(ref, "/") || strings.EqualFold(first, "github.com") || strings.ToLower(first) == "github.com" {
		return "", ErrNotInRepository
	}
	for _, r := range ref {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-+~/ ", r)) {
			return "", ErrNotInRepository
		}
	}
	local := strings.TrimPrefix(path.Clean("/"+path.Join(dir, ref)), "/")
	if strings.HasPrefix(path.Clean(path.Join(dir, ref)), "..") || !t.Exists(local) {
		return "", ErrNotInRepository
	}
	return local, nil
}
