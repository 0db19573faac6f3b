package render

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/plumb-dev/plumb/internal/source/tree"
)

// thousandObjects is a folder of 100 files with 10 ConfigMaps each.
func thousandObjects(b *testing.B) (*tree.Tree, map[string]string) {
	b.Helper()
	files := map[string]string{}
	for f := range 100 {
		var doc bytes.Buffer
		for o := range 10 {
			fmt.Fprintf(&doc, "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-%03d-%02d\n  namespace: bench\n  labels: {app: bench, shard: %q}\ndata:\n  key: value-%d\n  other: \"%d\"\n", f, o, fmt.Sprint(f%7), o, f*o)
		}
		files[fmt.Sprintf("deploy/part-%03d/objects.yaml", f)] = doc.String()
	}
	bt := tree.NewBuilder(tree.Limits{}, func(key string) ([]byte, error) { return []byte(files[key]), nil })
	for name, content := range files {
		if err := bt.AddFile(name, int64(len(content)), name); err != nil {
			b.Fatal(err)
		}
	}
	return bt.Build(), files
}

// BenchmarkRenderPlain1000Objects renders a 1,000-object folder with plumb's
// parser (file:line tracking, validation, List flattening).
func BenchmarkRenderPlain1000Objects(b *testing.B) {
	t, _ := thousandObjects(b)
	b.ReportAllocs()
	for b.Loop() {
		_, objects, err := Render(context.Background(), t, "deploy", Options{})
		if err != nil || len(objects) != 1000 {
			b.Fatalf("%d objects, %v", len(objects), err)
		}
	}
}

// BenchmarkBaselineAPIMachineryDecode1000Objects decodes the same files the
// way client tools commonly do (apimachinery's YAML-or-JSON decoder into
// unstructured), without source positions or validation: the baseline.
func BenchmarkBaselineAPIMachineryDecode1000Objects(b *testing.B) {
	t, files := thousandObjects(b)
	names, err := t.Files("deploy")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		count := 0
		for _, name := range names {
			if path.Ext(name) != ".yaml" {
				continue
			}
			dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader([]byte(files[name])), 4096)
			for {
				var u unstructured.Unstructured
				if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
					break
				} else if err != nil {
					b.Fatal(err)
				}
				if u.Object != nil {
					count++
				}
			}
		}
		if count != 1000 {
			b.Fatalf("%d objects", count)
		}
	}
}
