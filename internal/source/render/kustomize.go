package render

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/provider"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/plumb-dev/plumb/internal/source/manifest"
	"github.com/plumb-dev/plumb/internal/source/tree"
)

// kustomizationNames are the file names kustomize recognises, in its order.
var kustomizationNames = []string{"kustomization.yaml", "kustomization.yml", "Kustomization"}

// ErrNotInRepository means a kustomization refers to something that is not
// a file or folder of the repository (a URL, a remote Git base, a missing
// path): plumb renders from the repository alone.
var ErrNotInRepository = errors.New("not a file or folder in the repository (remote resources are disabled: vendor them into the repository)")

// renderKustomize builds the kustomization in dir on an in-memory copy of
// the files it reads. Plugins (exec and container functions), Helm
// inflation, and generators, transformers and validators (whose configs may
// name URLs) are off, and loading is restricted to the kustomization's root.
// Before the build starts, every path that any kustomization it reaches
// names must be a file or folder of the repository, spelled so that
// kustomize cannot take it for a URL or a remote Git base: kustomize's
// loader then never clones, never makes an HTTP request and never creates a
// temporary folder.
func renderKustomize(ctx context.Context, t *tree.Tree, dir string) ([]manifest.Object, error) {
	plan, err := planKustomize(t, dir)
	if err != nil {
		return nil, err
	}
	fs := filesys.MakeFsInMemory()
	err = readFiles(ctx, t, plan.files(), func(file string, data []byte) error {
		if err := fs.WriteFile("/"+file, data); err != nil {
			return &Error{Engine: Kustomize, Path: dir, Err: fmt.Errorf("copying %s for kustomize: %w", file, err)}
		}
		return nil
	})
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

// maxKustomizations bounds how many kustomizations one build may
// accumulate, counting a base once for every path that reaches it (as
// Kustomize builds it again for each): bases that each name the next level
// twice would otherwise make a build of a few files take exponential time.
const maxKustomizations = 1000

// kustomizePlan is what a Kustomize build would read: the kustomizations
// it reaches and the files they name.
type kustomizePlan struct {
	builds   map[string]int  // folder → kustomizations its build accumulates
	visiting map[string]bool // folders on the way (a cycle is an error)
	read     map[string]bool // repository files the build reads
}

// planKustomize checks the kustomization in dir and every local base it
// reaches (see onlyRepositoryPaths) and returns what the build reads.
func planKustomize(t *tree.Tree, dir string) (*kustomizePlan, error) {
	p := &kustomizePlan{builds: map[string]int{}, visiting: map[string]bool{}, read: map[string]bool{}}
	if _, err := p.onlyRepositoryPaths(t, dir); err != nil {
		return nil, &Error{Engine: Kustomize, Path: dir, Err: err}
	}
	return p, nil
}

// files lists what the build reads, sorted.
func (p *kustomizePlan) files() []string {
	out := make([]string, 0, len(p.read))
	for f := range p.read {
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}

// onlyRepositoryPaths walks the kustomization in dir and every local base
// it reaches, decoding each as Kustomize itself does (so that fields match
// whatever their case), and fails on any reference that is not a path in
// the repository, or when the build would accumulate more than
// maxKustomizations kustomizations. It returns how many it would.
func (p *kustomizePlan) onlyRepositoryPaths(t *tree.Tree, dir string) (int, error) {
	if n, ok := p.builds[dir]; ok {
		return n, nil
	}
	if p.visiting[dir] {
		return 0, fmt.Errorf("%s: a kustomization that includes itself", displayDir(dir))
	}
	p.visiting[dir] = true
	defer delete(p.visiting, dir)
	file := ""
	for _, name := range kustomizationNames {
		if candidate := path.Join(dir, name); t.Exists(candidate) {
			file = candidate
			break
		}
	}
	if file == "" {
		p.builds[dir] = 1
		return 1, nil // a plain folder used as a resource (Kustomize refuses it)
	}
	p.read[file] = true
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
	if len(k.Generators)+len(k.Transformers)+len(k.Validators) > 0 {
		return 0, fmt.Errorf("%s: generators, transformers and validators are not supported (their configs may load files from anywhere): "+
			"use configMapGenerator, secretGenerator, patches or replacements", file)
	}
	total := 1
	for _, ref := range referencedPaths(&k) {
		local, err := repositoryPath(t, dir, ref)
		if err != nil {
			return 0, fmt.Errorf("%s refers to %q: %w", file, ref, err)
		}
		if !t.IsDir(local) {
			p.read[local] = true
			continue
		}
		n, err := p.onlyRepositoryPaths(t, local)
		if err != nil {
			return 0, err
		}
		if total += n; total > maxKustomizations {
			return 0, &tree.LimitError{Limit: "kustomizations in one build", Max: maxKustomizations, Got: int64(total), Path: file}
		}
	}
	p.builds[dir] = total
	return total, nil
}

// referencedPaths lists every path a kustomization makes Kustomize load.
// Entries of patchesStrategicMerge that Kustomize takes for inline content
// (it tries that first) are content, not paths.
func referencedPaths(k *types.Kustomization) []string {
	refs := append([]string(nil), k.Resources...)
	refs = append(refs, k.Components...)
	refs = append(refs, k.Crds...)
	refs = append(refs, k.Configurations...)
	for _, p := range k.PatchesStrategicMerge {
		if !inlineContent(string(p)) {
			refs = append(refs, string(p))
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
	return refs
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

// resources decides, as Kustomize does for patchesStrategicMerge, whether
// an entry is inline content (a patch) rather than a path.
var resources = provider.NewDefaultDepProvider().GetResourceFactory()

func inlineContent(entry string) bool {
	_, err := resources.SliceFromBytes([]byte(entry))
	return err == nil
}

// repositoryPath returns the repository path that ref, relative to dir,
// names, when it is one: a relative path of the repository that exists,
// written with ASCII letters, digits and ._-/ only (so Kustomize sees no
// URL, no scp-like "user@host:" and no query in it, and its in-memory file
// system takes the name), whose first element is not github.com (which
// Kustomize takes for GitHub). Anything else fails with ErrNotInRepository.
func repositoryPath(t *tree.Tree, dir, ref string) (string, error) {
	first, _, _ := strings.Cut(ref, "/")
	if ref == "" || strings.HasPrefix(ref, "/") || strings.EqualFold(first, "github.com") || strings.ToLower(first) == "github.com" {
		return "", ErrNotInRepository
	}
	for _, r := range ref {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-/", r)) {
			return "", ErrNotInRepository
		}
	}
	local := strings.TrimPrefix(path.Clean("/"+path.Join(dir, ref)), "/")
	if strings.HasPrefix(path.Clean(path.Join(dir, ref)), "..") || !t.Exists(local) {
		return "", ErrNotInRepository
	}
	return local, nil
}
