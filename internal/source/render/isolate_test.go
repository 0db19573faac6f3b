package render

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/plumb-dev/plumb/internal/source/tree"
)

// childEnv marks this test binary, started again by an Isolation, as the
// render process.
const childEnv = "PLUMB_TEST_RENDER_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		if err := ServeIsolated(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// testIsolation runs builds in this test binary, as plumb's render-sandbox.
func testIsolation(timeout time.Duration, memory uint64) *Isolation {
	return &Isolation{Command: []string{os.Args[0]}, Env: []string{childEnv + "=1"}, Timeout: timeout, MemoryBytes: memory}
}

type renderMode struct {
	name      string
	isolation *Isolation
}

// renderModes are the two ways a build runs: in-process, and isolated.
func renderModes() []renderMode {
	return []renderMode{{"in-process", nil}, {"isolated", testIsolation(time.Minute, 0)}}
}

func TestAnIsolatedBuildThatRunsAwayIsStopped(t *testing.T) {
	chart := func(template string) map[string]string {
		return map[string]string{"c/Chart.yaml": "apiVersion: v2\nname: c\nversion: 1.0.0\n", "c/templates/x.yaml": template}
	}
	for _, tt := range []struct {
		name      string
		template  string
		isolation *Isolation
		limit     string
	}{
		{"ten billion loop iterations", "{{ range until 100000 }}{{ range until 100000 }}{{ end }}{{ end }}",
			testIsolation(2*time.Second, 0), "render time in seconds"},
		{"a slice of two hundred million numbers", "{{ len (until 200000000) }}",
			testIsolation(time.Minute, 512<<20), "render memory in bytes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := Render(context.Background(), treeOf(t, chart(tt.template)), "c", Options{Isolation: tt.isolation})
			var limitErr *tree.LimitError
			if !errors.As(err, &limitErr) || limitErr.Limit != tt.limit {
				t.Fatalf("Render = %v, want a %q LimitError", err, tt.limit)
			}
		})
	}
}

func TestAnIsolatedBuildGivesWhatAnInProcessBuildGives(t *testing.T) {
	repo := treeFromDir(t, "testdata/repo")
	big := map[string]string{
		"c/Chart.yaml": "apiVersion: v2\nname: c\nversion: 1.0.0\n",
		"c/templates/x.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: big}\ndata: {}\nbinaryData: {}\nimmutable: false\n" +
			"x-large: 9007199254740993\nx-float: 1.5\nx-list: [1, 2]\n",
	}
	for _, tt := range []struct {
		name string
		tree *tree.Tree
		dir  string
		opts Options
	}{
		{"kustomize overlay", repo, "kustomize/overlays/prod", Options{}},
		{"helm chart with values", repo, "helm/web", Options{Helm: HelmOptions{ReleaseName: "shop", Namespace: "prod", ValuesFiles: []string{"helm/values/prod.yaml"}}}},
		{"integers beyond float64", treeOf(t, big), "c", Options{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, want, err := Render(context.Background(), tt.tree, tt.dir, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			tt.opts.Isolation = testIsolation(time.Minute, 0)
			_, got, err := Render(context.Background(), tt.tree, tt.dir, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("isolated build (-in-process +isolated):\n%s", diff)
			}
		})
	}
}
