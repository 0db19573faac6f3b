package source_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/plumb-dev/plumb/internal/source"
	"github.com/plumb-dev/plumb/internal/source/git"
)

// benchRepo pushes a repository with a 1,000-object folder.
func benchRepo(b *testing.B) source.Request {
	b.Helper()
	files := map[string]string{}
	for f := range 100 {
		var doc strings.Builder
		for o := range 10 {
			doc.WriteString("---\n" + configMap(fmt.Sprintf("cm-%03d-%02d", f, o), fmt.Sprint(f*o)))
		}
		files[fmt.Sprintf("deploy/part-%03d.yaml", f)] = doc.String()
	}
	_, _, url := repo(b, files)
	return source.Request{URL: url, Ref: git.Ref{Branch: "main"}, Path: "deploy", Auth: auth}
}

// BenchmarkReadUnchanged is a timer tick on a repository whose ref has not
// moved: one ls-remote round trip, no fetch, no render.
func BenchmarkReadUnchanged(b *testing.B) {
	req := benchRepo(b)
	r := newReader(b, source.DefaultLimits())
	ctx := context.Background()
	if _, err := r.Read(ctx, req); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		res, err := r.Read(ctx, req)
		if err != nil || !res.Cached {
			b.Fatalf("cached=%v err=%v", res != nil && res.Cached, err)
		}
	}
}

// BenchmarkBaselineReadRerender is the same tick without the render cache:
// ls-remote, the commit found in the local cache, then a full render of
// 1,000 objects. The difference to BenchmarkReadUnchanged is what the
// shortcut saves.
func BenchmarkBaselineReadRerender(b *testing.B) {
	req := benchRepo(b)
	req.Refresh = true
	r := newReader(b, source.DefaultLimits())
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Read(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBaselineReadCold is a read with an empty cache: ls-remote, a full
// fetch and a render, as a controller that clones on every tick pays.
func BenchmarkBaselineReadCold(b *testing.B) {
	req := benchRepo(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := newReader(b, source.DefaultLimits()).Read(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}
