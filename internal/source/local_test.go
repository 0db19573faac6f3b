package source_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/plumb-dev/plumb/internal/source"
)

func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		full := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLocalRendersAWorkingCopyAsGitWould reads an overlay in a working
// copy: its ../base resolves (the tree is the whole repository), what
// .gitignore ignores and what is under .git is not read (both would fail
// the render), and the revision names no commit.
func TestLocalRendersAWorkingCopyAsGitWould(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		".git/HEAD":                      "ref: refs/heads/main\n",
		".git/broken.yaml":               "{not yaml",
		".gitignore":                     "*.tmp.yaml\n",
		"base/kustomization.yaml":        "resources: [configmap.yaml]\n",
		"base/configmap.yaml":            configMap("web", "base"),
		"apps/web/kustomization.yaml":    "resources: [../../base]\nnamePrefix: prod-\n",
		"apps/web/scratch.tmp.yaml":      "{not yaml either",
		"apps/plain/configmap.yaml":      configMap("plain", "one"),
		"apps/plain/ignored-by.tmp.yaml": "{not yaml",
		"apps/plain/nested/service.yaml": "apiVersion: v1\nkind: Service\nmetadata: {name: plain}\nspec: {ports: [{port: 80}]}\n",
	})
	for _, tc := range []struct {
		dir  string
		want []string
	}{
		{"apps/web", []string{"ConfigMap/prod-web"}},
		{"apps/plain", []string{"ConfigMap/plain", "Service/plain"}},
	} {
		local := &source.Local{Dir: filepath.Join(root, tc.dir), Limits: source.DefaultLimits()}
		result, err := local.Read(context.Background(), source.Request{})
		if err != nil {
			t.Fatalf("reading %s: %v", tc.dir, err)
		}
		var got []string
		for _, o := range result.Objects {
			got = append(got, o.GetKind()+"/"+o.GetName())
		}
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s rendered %v, want %v", tc.dir, got, tc.want)
		}
		if result.Revision.Name != source.LocalRevision || result.Revision.Hex() != "" {
			t.Errorf("revision %+v, want %s and no commit", result.Revision, source.LocalRevision)
		}
	}
	// A folder that is not there says so.
	if _, err := (&source.Local{Dir: filepath.Join(root, "nope")}).Read(context.Background(), source.Request{}); err == nil || source.ReasonOf(err) != source.ReasonInvalidSpec {
		t.Errorf("a missing folder: %v, want an InvalidSpec error", err)
	}
}
