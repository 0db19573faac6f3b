package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// plumb diff --revision previews a Helm App at another chart version,
// named alone or as recorded (<version>@sha256:<digest>).
func TestDiffAtARevisionOfAHelmApp(t *testing.T) {
	w := newWorld(t, "cli-helm", "--allow-insecure-registries")
	ns := w.ns
	repo := testenv.StartHelmRepository(t, testenv.HelmRepositoryOptions{Username: "cli", Password: "s3cret-cli"})
	chart := func(greeting string) map[string]string {
		return map[string]string{"templates/configmap.yaml": configMap(ns, "web", map[string]string{"greeting": greeting})}
	}
	v1 := repo.Publish(t, "web", "1.0.0", chart("hello"))
	v2 := repo.Publish(t, "web", "2.0.0", chart("bonjour"))
	credentials := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "charts"},
		StringData: map[string]string{"username": repo.Username, "password": repo.Password}}
	if err := w.k8s.Create(context.Background(), credentials); err != nil {
		t.Fatal(err)
	}
	w.createApp("web", "web", func(app *plumbv1.App) {
		app.Spec.Source = plumbv1.Source{Helm: &plumbv1.HelmSource{Repository: repo.URL, Chart: "web", Version: "^1",
			SecretRef: &plumbv1.LocalObjectReference{Name: credentials.Name}}}
	})
	w.waitFor("web", "Ready at 1.0.0@sha256:"+v1, func(app *plumbv1.App) bool {
		return app.Status.LastAppliedRevision == "1.0.0@sha256:"+v1
	})

	if r := w.plumb("diff", "web", "-n", ns, "--allow-insecure-registries"); r.code != 0 || !strings.Contains(r.stdout, "1.0.0@sha256:"+v1) {
		t.Errorf("plumb diff on the converged App: %s\nwant exit 0 and the revision 1.0.0@sha256:%s", r, v1)
	}
	for _, rev := range []string{"2.0.0", "v2.0.0", "2.0.0@sha256:" + v2} {
		t.Run(rev, func(t *testing.T) {
			report, r := w.diffJSON("web", "--revision", rev, "--allow-insecure-registries")
			if r.code != 1 {
				t.Errorf("exit %d, want 1\n%s", r.code, r)
			}
			if diff := cmp.Diff(map[string]string{"ConfigMap/web": "update .data.greeting"}, changed(report)); diff != "" {
				t.Errorf("changed objects (-want +got):\n%s", diff)
			}
			if want := "2.0.0@sha256:" + v2; report.Revision != want {
				t.Errorf("revision %q, want %q", report.Revision, want)
			}
		})
	}
	for _, tc := range []struct{ rev, want string }{
		{">=2", "a Helm App's revision is a chart version"},
		{"9.0.0", "no version of chart"},
		// A recorded revision whose digest is not the archive's now.
		{"2.0.0@sha256:" + v1, "the repository's chart 2.0.0 is now sha256:" + v2 + ", not the recorded sha256:" + v1},
	} {
		if r := w.plumb("diff", "web", "-n", ns, "--revision", tc.rev, "--allow-insecure-registries"); r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("--revision %q: %s\nwant exit 2 and %q", tc.rev, r, tc.want)
		}
	}
	// --path: a working copy's chart whose dependency is not vendored gets
	// it from its repository, with the App's account, as a tick would.
	dir := t.TempDir()
	wrapper := fmt.Sprintf("apiVersion: v2\nname: wrapper\nversion: 0.1.0\ndependencies:\n- {name: web, version: ^2.0.0, repository: %q}\n", repo.URL)
	if err := os.WriteFile(filepath.Join(dir, "Chart.yaml"), []byte(wrapper), 0o644); err != nil {
		t.Fatal(err)
	}
	if report, r := w.diffJSON("web", "--path", dir, "--allow-insecure-registries"); r.code != 1 ||
		!cmp.Equal(changed(report), map[string]string{"ConfigMap/web": "update .data.greeting"}) || report.Revision != "working-copy" {
		t.Errorf("--path with a chart dependency: %s\nwant exit 1, web 2.0.0's greeting, at working-copy", r)
	}
	if r := w.plumb("diff", "web", "-n", ns); r.code != 2 || !strings.Contains(r.stderr, "--allow-insecure-registries") {
		t.Errorf("plumb diff without --allow-insecure-registries: %s\nwant exit 2 naming the flag", r)
	}
}
