package render

import (
	"context"
	"errors"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/plumb-dev/plumb/internal/source/manifest"
	"github.com/plumb-dev/plumb/internal/source/tree"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// treeFromDir builds a tree from a folder on disk (symlinks kept as links).
func treeFromDir(t *testing.T, root string) *tree.Tree {
	t.Helper()
	b := tree.NewBuilder(tree.Limits{}, func(key string) ([]byte, error) { return os.ReadFile(key) })
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.Type()&fs.ModeSymlink != 0 {
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return b.AddSymlink(filepath.ToSlash(rel), target)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return b.AddFile(filepath.ToSlash(rel), info.Size(), p)
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.Build()
}

// treeOf builds a tree from a map of path → content ("-> x" is a symlink).
func treeOf(t *testing.T, files map[string]string) *tree.Tree {
	t.Helper()
	b := tree.NewBuilder(tree.Limits{}, func(key string) ([]byte, error) { return []byte(files[key]), nil })
	for name, content := range files {
		var err error
		if target, ok := strings.CutPrefix(content, "-> "); ok {
			err = b.AddSymlink(name, target)
		} else {
			err = b.AddFile(name, int64(len(content)), name)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return b.Build()
}

// golden renders objects as a YAML stream with a comment naming each source.
func golden(t *testing.T, engine Engine, objects []manifest.Object) string {
	t.Helper()
	var out strings.Builder
	out.WriteString("# engine: " + string(engine) + "\n")
	for _, o := range objects {
		data, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		out.WriteString("---\n# source: " + o.Source.String() + "\n" + string(data))
	}
	return out.String()
}

func TestRenderGolden(t *testing.T) {
	repo := treeFromDir(t, "testdata/repo")
	tests := []struct {
		name   string
		dir    string
		opts   Options
		engine Engine
	}{
		{name: "plain", dir: "plain", engine: Plain},
		{name: "kustomize-overlay", dir: "kustomize/overlays/prod", engine: Kustomize},
		{name: "helm-values", dir: "helm/web", engine: Helm, opts: Options{Helm: HelmOptions{
			ReleaseName: "shop",
			Namespace:   "shop-prod",
			ValuesFiles: []string{"helm/values/prod.yaml"},
			Values:      map[string]any{"image": "nginx:1.28"},
		}}},
	}
	for _, mode := range renderModes() {
		for _, tt := range tests {
			t.Run(mode.name+"/"+tt.name, func(t *testing.T) {
				tt.opts.Isolation = mode.isolation
				engine, objects, err := Render(context.Background(), repo, tt.dir, tt.opts)
				if err != nil {
					t.Fatalf("Render(%s): %v", tt.dir, err)
				}
				if engine != tt.engine {
					t.Errorf("engine = %s, want %s", engine, tt.engine)
				}
				got := golden(t, engine, objects)
				file := filepath.Join("testdata", "golden", tt.name+".yaml")
				if *update {
					if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				want, err := os.ReadFile(file)
				if err != nil {
					t.Fatalf("%v (run go test ./source/render -update to create it)", err)
				}
				if diff := cmp.Diff(string(want), got); diff != "" {
					t.Errorf("render of %s differs from %s (-want +got):\n%s", tt.dir, file, diff)
				}
			})
		}
	}
}

func TestHelmValuesAreNotChangedByRendering(t *testing.T) {
	repo := treeFromDir(t, "testdata/repo")
	values := map[string]any{"service": map[string]any{"port": 9090}}
	opts := Options{Helm: HelmOptions{ReleaseName: "a", Namespace: "b", Values: values}}
	for range 2 {
		if _, _, err := Render(context.Background(), repo, "helm/web", opts); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff(map[string]any{"service": map[string]any{"port": 9090}}, values); diff != "" {
		t.Errorf("inline values changed (-want +got):\n%s", diff)
	}
}

func TestRenderErrors(t *testing.T) {
	tests := []struct {
		name    string
		files   map[string]string
		dir     string
		opts    Options
		wantErr error
		wantAs  any
		want    string
	}{{
		name:    "missing path",
		files:   map[string]string{"a/x.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"},
		dir:     "deploy/prod",
		wantErr: ErrPathNotFound,
		want:    "deploy/prod: path not found in the repository",
	}, {
		name:    "path is a file",
		files:   map[string]string{"a/x.yaml": "x: 1"},
		dir:     "a/x.yaml",
		wantErr: ErrPathNotFound,
	}, {
		name:    "path is a symlink out of the repository",
		files:   map[string]string{"a/x.yaml": "x: 1", "deploy": "-> ../elsewhere"},
		dir:     "deploy",
		wantErr: tree.ErrEscapesRoot,
		want:    "symlink deploy → ../elsewhere",
	}, {
		name:    "a symlinked manifest leaves the repository",
		files:   map[string]string{"deploy/a.yaml": "-> /etc/passwd"},
		dir:     "deploy",
		wantErr: tree.ErrEscapesRoot,
		want:    "deploy/a.yaml",
	}, {
		name:   "invalid YAML names the file and line",
		files:  map[string]string{"deploy/a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\nkind: [\n"},
		dir:    "deploy",
		wantAs: new(*manifest.Error),
		want:   "deploy/a.yaml:5: invalid YAML",
	}, {
		name: "kustomize remote base",
		files: map[string]string{
			"k/kustomization.yaml":    "resources:\n- local.yaml\n- ../base\n",
			"k/local.yaml":            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
			"base/kustomization.yaml": "resources:\n- https://github.com/org/repo//deploy?ref=v1\n",
		},
		dir:     "k",
		wantErr: ErrNotInRepository,
		want:    `kustomize build of k: base/kustomization.yaml refers to "https://github.com/org/repo//deploy?ref=v1": not a file or folder in the repository`,
	}, {
		name:    "kustomize remote git base without scheme",
		files:   map[string]string{"k/kustomization.yaml": "resources:\n- github.com/org/repo/deploy?ref=main\n"},
		dir:     "k",
		wantErr: ErrNotInRepository,
	}, {
		name:    "kustomize remote patch file",
		files:   map[string]string{"k/kustomization.yaml": "patches:\n- path: http://evil.example/patch.yaml\n"},
		dir:     "k",
		wantErr: ErrNotInRepository,
	}, {
		name: "kustomize exec plugin",
		files: map[string]string{
			"k/kustomization.yaml": "generators:\n- gen.yaml\n",
			"k/gen.yaml":           "apiVersion: someteam.example.com/v1\nkind: ChartInflator\nmetadata: {name: x}\n",
		},
		dir:    "k",
		wantAs: new(*Error),
		want:   "kustomize build of k",
	}, {
		name:   "kustomize file outside the kustomization root",
		files:  map[string]string{"k/kustomization.yaml": "configMapGenerator:\n- name: x\n  files: [../secret.txt]\n", "secret.txt": "s"},
		dir:    "k",
		wantAs: new(*Error),
		want:   "security; file '/secret.txt' is not in or below '/k'",
	}, {
		name: "helm dependency not vendored",
		files: map[string]string{
			"c/Chart.yaml":  "apiVersion: v2\nname: c\nversion: 1.0.0\ndependencies:\n- name: redis\n  version: 1.x\n  repository: https://charts.example\n",
			"c/values.yaml": "",
		},
		dir:    "c",
		wantAs: new(*Error),
		want:   `helm build of c: dependency "redis" is not in charts/`,
	}, {
		name: "helm template error",
		files: map[string]string{
			"c/Chart.yaml":        "apiVersion: v2\nname: c\nversion: 1.0.0\n",
			"c/templates/cm.yaml": "{{ .Values.missing.field }}",
		},
		dir:    "c",
		wantAs: new(*Error),
		want:   "helm build of c: template: c/templates/cm.yaml:1",
	}, {
		name: "helm values file missing",
		files: map[string]string{
			"c/Chart.yaml": "apiVersion: v2\nname: c\nversion: 1.0.0\n",
		},
		dir:     "c",
		opts:    Options{Helm: HelmOptions{ValuesFiles: []string{"values/nope.yaml"}}},
		wantErr: tree.ErrNotExist,
		want:    "values/nope.yaml",
	}}
	for _, mode := range renderModes() {
		for _, tt := range tests {
			t.Run(mode.name+"/"+tt.name, func(t *testing.T) {
				tt.opts.Isolation = mode.isolation
				_, _, err := Render(context.Background(), treeOf(t, tt.files), tt.dir, tt.opts)
				if err == nil {
					t.Fatal("Render succeeded, want an error")
				}
				if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
					t.Errorf("error %v is not %v", err, tt.wantErr)
				}
				if tt.wantAs != nil && !errors.As(err, tt.wantAs) {
					t.Errorf("error %v (%T) is not a %T", err, err, tt.wantAs)
				}
				if !strings.Contains(err.Error(), tt.want) {
					t.Errorf("error %q does not contain %q", err, tt.want)
				}
			})
		}
	}
}

func TestPlainFolderWithoutManifestsRendersNothing(t *testing.T) {
	engine, objects, err := Render(context.Background(), treeOf(t, map[string]string{"docs/README.md": "hi"}), "docs", Options{})
	if err != nil || engine != Plain || len(objects) != 0 {
		t.Errorf("Render(docs) = %s, %d objects, %v; want plain, none, no error", engine, len(objects), err)
	}
}

// As Helm does (its install and template check the chart's own
// dependencies only), a dependency of a dependency that is not vendored
// is left out, not an error: published charts list optional ones they
// ship without.
func TestAMissingDependencyOfADependencyIsLeftOut(t *testing.T) {
	files := map[string]string{
		"c/Chart.yaml":                 "apiVersion: v2\nname: c\nversion: 1.0.0\ndependencies:\n- name: db\n  version: 1.x\n",
		"c/charts/db/Chart.yaml":       "apiVersion: v2\nname: db\nversion: 1.0.0\ndependencies:\n- name: redis\n  version: 1.x\n  repository: https://charts.example\n  condition: redis.enabled\n",
		"c/charts/db/templates/a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: db\n",
	}
	for _, mode := range renderModes() {
		t.Run(mode.name, func(t *testing.T) {
			_, objects, err := Render(context.Background(), treeOf(t, files), "c", Options{Isolation: mode.isolation})
			if err != nil {
				t.Fatalf("a chart whose dependency lists a dependency it ships without: %v", err)
			}
			if len(objects) != 1 || objects[0].GetName() != "db" {
				t.Errorf("rendered %d objects, want db's ConfigMap", len(objects))
			}
		})
	}
}
