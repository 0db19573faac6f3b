package render

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/plumb-dev/plumb/internal/source/tree"
)

// offline makes the test process unable to reach what a remote kustomize
// base would need, and lets it see the attempt: no git on PATH (kustomize
// then fails with "no 'git' program on path" before it clones), temporary
// folders in a folder of the test's, and HTTP through a transport that
// counts and refuses.
func offline(t testing.TB, setenv func(key, value string)) (tmp string, httpCalls *atomic.Int64) {
	t.Helper()
	tmp = t.TempDir()
	setenv("PATH", "")
	setenv("TMPDIR", tmp)
	httpCalls = &atomic.Int64{}
	original := http.DefaultTransport
	http.DefaultTransport = roundTripFunc(func(*http.Request) (*http.Response, error) {
		httpCalls.Add(1)
		return nil, errors.New("the test refuses every HTTP request")
	})
	t.Cleanup(func() { http.DefaultTransport = original })
	return tmp, httpCalls
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// reachedOut reports what a render tried beyond the repository.
func reachedOut(t testing.TB, tmp string, httpCalls *atomic.Int64, err error) string {
	t.Helper()
	var out []string
	if err != nil && strings.Contains(err.Error(), "no 'git' program") {
		out = append(out, "tried to run git: "+err.Error())
	}
	if n := httpCalls.Load(); n > 0 {
		out = append(out, "made HTTP requests")
	}
	entries, _ := os.ReadDir(tmp)
	for _, e := range entries {
		out = append(out, "left a temporary folder "+e.Name())
	}
	return strings.Join(out, "; ")
}

const localConfigMap = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n"

func TestKustomizeRefusesEveryReferenceThatIsNotAPathInTheRepository(t *testing.T) {
	tmp, httpCalls := offline(t, t.Setenv)
	for _, ref := range []string{
		"deploy@127.0.0.1:org/repo.git",
		"GitHub.com/org/repo/deploy",
		"github.com:org/repo",
		"git::https://example.com/org/repo",
		"ssh://git@example.com/org/repo",
		"file:///etc/kubernetes",
		"https://example.com/cm.yaml",
		"HTTPS://example.com/cm.yaml",
		"org/repo.git/deploy?ref=main",
		"missing-folder",
		"/etc",
	} {
		t.Run(ref, func(t *testing.T) {
			files := map[string]string{
				"k/kustomization.yaml": "resources:\n- local.yaml\n- " + ref + "\n",
				"k/local.yaml":         localConfigMap,
			}
			_, _, err := Render(context.Background(), treeOf(t, files), "k", Options{})
			if what := reachedOut(t, tmp, httpCalls, err); what != "" {
				t.Fatalf("the render reached outside the repository: %s", what)
			}
			if !errors.Is(err, ErrNotInRepository) || !strings.Contains(err.Error(), ref) {
				t.Fatalf("Render = %v, want ErrNotInRepository naming %q", err, ref)
			}
		})
	}
}

func TestKustomizeFieldsAreCheckedWhateverTheirCase(t *testing.T) {
	tmp, httpCalls := offline(t, t.Setenv)
	for _, field := range []string{"Resources", "RESOURCES", "Bases", "Components", "PatchesStrategicMerge", "Crds", "Configurations"} {
		t.Run(field, func(t *testing.T) {
			files := map[string]string{
				"k/kustomization.yaml": field + ":\n- https://127.0.0.1:1/cm.yaml\n",
				"k/local.yaml":         localConfigMap,
			}
			_, _, err := Render(context.Background(), treeOf(t, files), "k", Options{})
			if what := reachedOut(t, tmp, httpCalls, err); what != "" {
				t.Fatalf("the render reached outside the repository: %s", what)
			}
			if !errors.Is(err, ErrNotInRepository) {
				t.Fatalf("Render = %v, want ErrNotInRepository", err)
			}
		})
	}
}

func TestKustomizeGeneratorTransformerAndValidatorConfigsAreRefused(t *testing.T) {
	tmp, httpCalls := offline(t, t.Setenv)
	// A built-in generator's config may name files at URLs (read by
	// Kustomize's loader, and applied into a ConfigMap the App can read).
	config := "apiVersion: builtin\nkind: ConfigMapGenerator\nmetadata: {name: leak}\nenvs: [http://169.254.169.254/latest/meta-data]\n"
	for _, tt := range []struct{ name, kustomization string }{
		{"an inline generator", "generators:\n- |-\n  " + strings.ReplaceAll(config, "\n", "\n  ") + "\n"},
		{"a generator file", "generators: [gen.yaml]\n"},
		{"a transformer file", "Transformers: [gen.yaml]\n"},
		{"a validator file", "validators: [gen.yaml]\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			files := map[string]string{"k/kustomization.yaml": tt.kustomization, "k/gen.yaml": config}
			_, _, err := Render(context.Background(), treeOf(t, files), "k", Options{})
			if what := reachedOut(t, tmp, httpCalls, err); what != "" {
				t.Fatalf("the render reached outside the repository: %s", what)
			}
			if err == nil || !strings.Contains(err.Error(), "generators, transformers and validators are not supported") {
				t.Fatalf("Render = %v, want a refusal", err)
			}
		})
	}
}

func TestKustomizeReadsOnlyTheFilesItsKustomizationsName(t *testing.T) {
	files := map[string]string{
		"k/kustomization.yaml":        "resources: [cm.yaml]\n",
		"k/cm.yaml":                   localConfigMap,
		"docs/my notes+ideas~café.md": "a name Kustomize's in-memory file system would refuse",
	}
	for _, mode := range renderModes() {
		t.Run(mode.name, func(t *testing.T) {
			if _, objects, err := Render(context.Background(), treeOf(t, files), "k", Options{Isolation: mode.isolation}); err != nil || len(objects) != 1 {
				t.Fatalf("Render = %d objects, %v; want 1", len(objects), err)
			}
		})
	}
}

func TestKustomizeInlinePatchesAreContentNotPaths(t *testing.T) {
	files := map[string]string{
		"k/kustomization.yaml": "resources:\n- cm.yaml\npatchesStrategicMerge:\n- |-\n  apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: a}\n  data: {color: green}\n",
		"k/cm.yaml":            localConfigMap,
	}
	_, objects, err := Render(context.Background(), treeOf(t, files), "k", Options{})
	if err != nil || len(objects) != 1 || objects[0].Object["data"].(map[string]any)["color"] != "green" {
		t.Fatalf("Render = %v, %v; want the ConfigMap patched green", objects, err)
	}
}

func TestKustomizeBasesThatMultiplyAreALimit(t *testing.T) {
	// Each level names the next one twice (with a different suffix, so the
	// objects differ): 12 levels would build 2^12 kustomizations.
	files := map[string]string{"l12/kustomization.yaml": "resources: [cm.yaml]\n", "l12/cm.yaml": localConfigMap}
	for i := range 12 {
		files[fmt.Sprintf("l%d/kustomization.yaml", i)] = fmt.Sprintf("resources: [../a%d, ../b%d]\n", i, i)
		files[fmt.Sprintf("a%d/kustomization.yaml", i)] = fmt.Sprintf("resources: [../l%d]\nnameSuffix: -a\n", i+1)
		files[fmt.Sprintf("b%d/kustomization.yaml", i)] = fmt.Sprintf("resources: [../l%d]\nnameSuffix: -b\n", i+1)
	}
	_, _, err := Render(context.Background(), treeOf(t, files), "l0", Options{})
	var limitErr *tree.LimitError
	if !errors.As(err, &limitErr) || limitErr.Limit != "kustomizations in one build" {
		t.Fatalf("Render = %v, want a kustomizations LimitError", err)
	}
}

func TestKustomizeRendersLocalBasesWithoutTemporaryFolders(t *testing.T) {
	tmp, httpCalls := offline(t, t.Setenv)
	files := map[string]string{
		"overlay/kustomization.yaml": "resources:\n- ../base\n- extra.yaml\nnamePrefix: prod-\n",
		"overlay/extra.yaml":         "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: extra}\n",
		"base/kustomization.yaml":    "resources:\n- cm.yaml\nconfigMapGenerator:\n- name: gen\n  files: [conf=conf.txt]\n",
		"base/cm.yaml":               localConfigMap,
		"base/conf.txt":              "x=1",
	}
	for range 3 {
		_, objects, err := Render(context.Background(), treeOf(t, files), "overlay", Options{})
		if err != nil || len(objects) != 3 {
			t.Fatalf("Render = %d objects, %v; want 3", len(objects), err)
		}
	}
	if what := reachedOut(t, tmp, httpCalls, nil); what != "" {
		t.Fatalf("rendering a local overlay %s", what)
	}
}

// FuzzKustomizeResources renders a kustomization with an arbitrary field
// holding an arbitrary entry: whatever they are, the render must not run
// git, make an HTTP request or leave a temporary folder.
func FuzzKustomizeResources(f *testing.F) {
	for _, seed := range []string{
		"local.yaml", "../base", "deploy@127.0.0.1:org/repo.git", "GitHub.com/org/repo", "git::https://x/y",
		"https://example.com/cm.yaml", "file:///etc", "a/b//c?ref=v1", "base", "user@host:path", "_git/repo",
	} {
		for _, field := range []string{"resources", "Resources", "bases", "components", "patchesStrategicMerge", "generators", "crds"} {
			f.Add(field, seed)
		}
	}
	tmp, httpCalls := offline(f, func(k, v string) {
		old, had := os.LookupEnv(k)
		os.Setenv(k, v)
		f.Cleanup(func() {
			if had {
				os.Setenv(k, old)
			} else {
				os.Unsetenv(k)
			}
		})
	})
	f.Fuzz(func(t *testing.T, field, ref string) {
		if strings.ContainsAny(ref, "\n\r\"'\\") || strings.ContainsAny(field, ":\n\r#\"'{}[]&*!|>%@`,\\ \t") || field == "" {
			return // keeps the YAML one field holding a list of one string
		}
		files := map[string]string{
			"k/kustomization.yaml":    "resources:\n- local.yaml\n" + field + ":\n- \"" + ref + "\"\n",
			"k/local.yaml":            localConfigMap,
			"base/kustomization.yaml": "resources: [cm.yaml]\n",
			"base/cm.yaml":            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n",
		}
		_, _, err := Render(context.Background(), treeOf(t, files), "k", Options{})
		if what := reachedOut(t, tmp, httpCalls, err); what != "" {
			t.Fatalf("%s: [%q]: the render reached outside the repository: %s", field, ref, what)
		}
	})
}
