package webhook

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

func app(name, url string, ref plumbv1.GitRef, path string, pathFilter bool) *plumbv1.App {
	a := &plumbv1.App{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name},
		Spec: plumbv1.AppSpec{Source: plumbv1.Source{URL: url, Ref: ref, Path: path}}}
	if pathFilter {
		a.Spec.Webhook = &plumbv1.WebhookSpec{PathFilter: true}
	}
	return a
}

// nested writes a's Git source as git rather than flat.
func nested(a *plumbv1.App) *plumbv1.App {
	src := a.Spec.Source
	a.Spec.Source = plumbv1.Source{Path: src.Path, Git: &plumbv1.GitSource{URL: src.URL, Ref: src.Ref}}
	return a
}

func keys(names ...string) []types.NamespacedName {
	out := []types.NamespacedName{}
	for _, n := range names {
		out = append(out, types.NamespacedName{Namespace: "apps", Name: n})
	}
	return out
}

func TestMatch(t *testing.T) {
	ix := NewIndex()
	for _, a := range []*plumbv1.App{
		app("main-https", "https://github.com/org/shop.git", plumbv1.GitRef{Branch: "main"}, "deploy", false),
		app("main-scp", "git@github.com:org/shop", plumbv1.GitRef{Branch: "main"}, "", false),
		app("dev", "https://github.com/org/shop", plumbv1.GitRef{Branch: "dev"}, "", false),
		app("tag", "https://github.com/org/shop", plumbv1.GitRef{Tag: "v1.2.0"}, "", false),
		app("semver", "ssh://git@github.com/org/shop.git", plumbv1.GitRef{SemVer: ">=1.0.0 <2"}, "", false),
		app("pinned", "https://github.com/org/shop", plumbv1.GitRef{Commit: "0123456789012345678901234567890123456789"}, "", false),
		app("filtered", "https://github.com/org/shop", plumbv1.GitRef{Branch: "main"}, "deploy/prod", true),
		app("other-repo", "https://github.com/org/other", plumbv1.GitRef{Branch: "main"}, "", false),
		app("local", "file:///srv/git/shop", plumbv1.GitRef{Branch: "main"}, "", false),
		nested(app("nested", "git@github.com:org/shop.git", plumbv1.GitRef{Branch: "release"}, "", false)),
	} {
		ix.Set(a)
	}
	tests := []struct {
		name string
		push Push
		want []types.NamespacedName
	}{
		{"a branch push matches every spelling of the repository on that branch",
			Push{URLs: []string{"https://github.com/org/shop"}, Ref: "refs/heads/main"},
			keys("filtered", "main-https", "main-scp")},
		{"a Git source written as git is matched as a flat one",
			Push{URLs: []string{"https://github.com/org/shop"}, Ref: "refs/heads/release"}, keys("nested")},
		{"another branch", Push{URLs: []string{"git@github.com:org/shop.git"}, Ref: "refs/heads/dev"}, keys("dev")},
		{"a tag push matches the tag and semver ranges that contain it",
			Push{URLs: []string{"https://github.com/org/shop.git"}, Ref: "refs/tags/v1.2.0"}, keys("semver", "tag")},
		{"a tag outside the range", Push{URLs: []string{"https://github.com/org/shop"}, Ref: "refs/tags/v2.0.0"}, keys()},
		{"the path filter skips a push that touched other paths",
			Push{URLs: []string{"https://github.com/org/shop"}, Ref: "refs/heads/main", ChangedPaths: []string{"docs/README.md", "deploy/dev/a.yaml"}},
			keys("main-https", "main-scp")},
		{"the path filter lets a push that touched the path through",
			Push{URLs: []string{"https://github.com/org/shop"}, Ref: "refs/heads/main", ChangedPaths: []string{"deploy/prod/web.yaml"}},
			keys("filtered", "main-https", "main-scp")},
		{"an unknown repository", Push{URLs: []string{"https://github.com/org/nope"}, Ref: "refs/heads/main"}, keys()},
		{"a ref that is neither a branch nor a tag", Push{URLs: []string{"https://github.com/org/shop"}, Ref: "refs/pull/1/head"}, keys()},
		{"several URL fields, one App once",
			Push{URLs: []string{"https://github.com/org/shop", "git@github.com:org/shop.git", "ssh://git@github.com/org/shop"}, Ref: "refs/heads/dev"},
			keys("dev")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ix.Match(tt.push)
			if tt.want == nil {
				tt.want = []types.NamespacedName{}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestIndexFollowsAppChanges(t *testing.T) {
	ix := NewIndex()
	a := app("moving", "https://github.com/org/one", plumbv1.GitRef{Branch: "main"}, "", false)
	ix.Set(a)
	a.Spec.Source.URL = "https://github.com/org/two"
	ix.Set(a)
	if got := ix.Match(Push{URLs: []string{"https://github.com/org/one"}, Ref: "refs/heads/main"}); len(got) != 0 {
		t.Errorf("the old URL still matches: %v", got)
	}
	if got := ix.Match(Push{URLs: []string{"https://github.com/org/two"}, Ref: "refs/heads/main"}); len(got) != 1 {
		t.Errorf("the new URL does not match: %v", got)
	}
	ix.Delete(types.NamespacedName{Namespace: "apps", Name: "moving"})
	if got := ix.Match(Push{URLs: []string{"https://github.com/org/two"}, Ref: "refs/heads/main"}); len(got) != 0 {
		t.Errorf("a deleted App matches: %v", got)
	}
}
