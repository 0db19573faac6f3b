package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/internal/source/render"
	"github.com/plumb-dev/plumb/internal/source/tree"
)

func chartTree(t *testing.T, template string) *tree.Tree {
	t.Helper()
	files := map[string]string{"c/Chart.yaml": "apiVersion: v2\nname: c\nversion: 1.0.0\n", "c/templates/x.yaml": template}
	b := tree.NewBuilder(tree.Limits{}, func(key string) ([]byte, error) { return []byte(files[key]), nil })
	for name, content := range files {
		if err := b.AddFile(name, int64(len(content)), name); err != nil {
			t.Fatal(err)
		}
	}
	return b.Build()
}

func TestPlumbRendersHelmInItsSandboxAndStopsARunawayBuild(t *testing.T) {
	sandbox := &render.Isolation{Command: []string{plumbBinary, renderSandboxCommand}, Timeout: time.Minute, MemoryBytes: 512 << 20}
	template := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: {{ .Release.Name }}}\ndata: {n: \"{{ len (until 10) }}\"}\n"
	engine, objects, err := render.Render(context.Background(), chartTree(t, template), "c",
		render.Options{Helm: render.HelmOptions{ReleaseName: "web", Namespace: "team"}, Isolation: sandbox})
	if err != nil || engine != render.Helm || len(objects) != 1 || objects[0].GetName() != "web" ||
		objects[0].Object["data"].(map[string]any)["n"] != "10" {
		t.Fatalf("Render in plumb's sandbox = %s %v, %v", engine, objects, err)
	}
	_, _, err = render.Render(context.Background(), chartTree(t, "{{ len (until 200000000) }}"), "c", render.Options{Isolation: sandbox})
	var limitErr *tree.LimitError
	if !errors.As(err, &limitErr) || limitErr.Limit != "render memory in bytes" {
		t.Fatalf("a template that takes 1.6 GB in a 512 MiB sandbox: %v, want a render memory LimitError", err)
	}
}
