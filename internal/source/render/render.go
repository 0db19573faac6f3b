// Package render turns a folder of a repository tree into Kubernetes objects:
// plain YAML/JSON manifests, a Kustomize overlay (built in-process, remote
// resources and plugins off) or a Helm chart (rendered in-process, no
// cluster lookups, no network). It never touches the cluster or the disk.
package render

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/plumb-dev/plumb/internal/source/manifest"
	"github.com/plumb-dev/plumb/internal/source/tree"
)

// Engine names how a folder is rendered.
type Engine string

const (
	// Plain reads every .yaml, .yml and .json file under the folder.
	Plain Engine = "plain"
	// Kustomize builds the folder's kustomization.yaml.
	Kustomize Engine = "kustomize"
	// Helm renders the chart whose Chart.yaml is in the folder.
	Helm Engine = "helm"
)

// Options configure rendering. Only the options of the detected engine apply.
type Options struct {
	// Helm configures Helm charts.
	Helm HelmOptions
	// Isolation, when set, runs Kustomize and Helm builds in a child process
	// that is killed at its timeout and capped in memory. Not part of what
	// a render produces, so not part of a render cache key.
	Isolation *Isolation `json:"-"`
}

// HelmOptions configure a Helm chart's rendering.
type HelmOptions struct {
	// ReleaseName is .Release.Name.
	ReleaseName string
	// Namespace is .Release.Namespace.
	Namespace string
	// ValuesFiles are repository paths of values files, merged in order
	// over the chart's own values.yaml.
	ValuesFiles []string
	// Values are merged last, over the files.
	Values map[string]any
	// KubeVersion is .Capabilities.KubeVersion (e.g. v1.37.2), and
	// APIVersions .Capabilities.APIVersions ("policy/v1",
	// "policy/v1/PodDisruptionBudget", …): what the target cluster serves,
	// as `helm template --kube-version --api-versions` take them. Empty,
	// Helm's defaults apply (an old Kubernetes version).
	KubeVersion string   `json:",omitempty"`
	APIVersions []string `json:",omitempty"`
}

// ErrPathNotFound means the folder to render does not exist at the revision.
var ErrPathNotFound = errors.New("path not found in the repository")

// Error is a failure of Kustomize or Helm, with the engine named.
type Error struct {
	Engine Engine
	Path   string
	Err    error
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s build of %s: %v", e.Engine, displayDir(e.Path), e.Err)
}
func (e *Error) Unwrap() error { return e.Err }

func displayDir(dir string) string {
	if dir == "" {
		return "the repository root"
	}
	return dir
}

// Detect says which engine renders the folder dir.
func Detect(t *tree.Tree, dir string) (Engine, error) {
	if !t.IsDir(dir) {
		if t.Exists(dir) {
			return "", fmt.Errorf("%s is a file, not a folder: %w", dir, ErrPathNotFound)
		}
		if _, err := t.Resolve(dir); errors.Is(err, tree.ErrEscapesRoot) {
			return "", err
		}
		return "", fmt.Errorf("%s: %w", displayDir(dir), ErrPathNotFound)
	}
	for _, name := range kustomizationNames {
		if t.Exists(path.Join(dir, name)) {
			return Kustomize, nil
		}
	}
	if t.Exists(path.Join(dir, "Chart.yaml")) {
		return Helm, nil
	}
	return Plain, nil
}

// Render renders the folder dir of the tree with the engine it detects. It
// stops between files when ctx ends; Kustomize's and Helm's own builds
// cannot be interrupted in-process, so with opts.Isolation they run in a
// child process that is stopped at its timeout and capped in memory.
func Render(ctx context.Context, t *tree.Tree, dir string, opts Options) (Engine, []manifest.Object, error) {
	dir = strings.Trim(path.Clean("/"+dir), "/")
	engine, err := Detect(t, dir)
	if err != nil {
		return "", nil, err
	}
	var objects []manifest.Object
	switch {
	case engine == Plain:
		objects, err = renderPlain(ctx, t, dir)
	case opts.Isolation != nil:
		objects, err = opts.Isolation.render(ctx, t, engine, dir, opts.Helm)
	case engine == Kustomize:
		objects, err = renderKustomize(ctx, t, dir)
	default:
		objects, err = renderHelm(ctx, t, dir, opts.Helm)
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return "", nil, err
	}
	return engine, objects, nil
}

// readFiles reads files of the tree, stopping when ctx ends.
func readFiles(ctx context.Context, t *tree.Tree, files []string, use func(file string, data []byte) error) error {
	for _, file := range files {
		if err := ctx.Err(); err != nil {
			return err
		}
		data, err := t.ReadFile(file)
		if err != nil {
			return err
		}
		if err := use(file, data); err != nil {
			return err
		}
	}
	return nil
}

// manifestExtensions are the files a plain folder renders.
var manifestExtensions = map[string]bool{".yaml": true, ".yml": true, ".json": true}

// renderPlain parses every manifest under dir, recursively, in lexical path
// order. Hidden files and folders (.github, .gitlab-ci.yml) are skipped.
func renderPlain(ctx context.Context, t *tree.Tree, dir string) ([]manifest.Object, error) {
	files, err := t.Files(dir)
	if err != nil {
		return nil, err
	}
	manifests := files[:0]
	for _, file := range files {
		if manifestExtensions[strings.ToLower(path.Ext(file))] && !hidden(strings.TrimPrefix(file, dir)) {
			manifests = append(manifests, file)
		}
	}
	var objects []manifest.Object
	err = readFiles(ctx, t, manifests, func(file string, data []byte) error {
		objs, err := manifest.Parse(file, data)
		objects = append(objects, objs...)
		return err
	})
	if err != nil {
		return nil, err
	}
	return objects, nil
}

func hidden(rel string) bool {
	for _, part := range strings.Split(strings.Trim(rel, "/"), "/") {
		if strings.HasPrefix(part, ".") {
			return true
		}
	}
	return false
}
