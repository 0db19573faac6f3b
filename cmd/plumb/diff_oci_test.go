package main

import (
	"context"
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

// plumb diff --revision previews an OCI App at another tag or manifest
// digest, named as a tag, tags/NAME, the digest, or a recorded
// <tag>@<digest>.
func TestDiffAtARevisionOfAnOCIApp(t *testing.T) {
	w := newWorld(t, "cli-oci", "--allow-insecure-registries")
	ns := w.ns
	registry := testenv.StartRegistry(t)
	v1 := registry.PushFiles(t, "cli/web", "v1", map[string]string{"web/configmap.yaml": configMap(ns, "web", map[string]string{"greeting": "hello"})})
	v2 := registry.PushFiles(t, "cli/web", "v2", map[string]string{"web/configmap.yaml": configMap(ns, "web", map[string]string{"greeting": "bonjour"})})
	credentials := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "registry"}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: registry.DockerConfig()}}
	if err := w.k8s.Create(context.Background(), credentials); err != nil {
		t.Fatal(err)
	}
	w.createApp("web", "web", func(app *plumbv1.App) {
		app.Spec.Source = plumbv1.Source{Path: "web", OCI: &plumbv1.OCISource{URL: registry.URL("cli/web"),
			Ref: plumbv1.OCIRef{Tag: "v1"}, Insecure: true, SecretRef: &plumbv1.LocalObjectReference{Name: credentials.Name}}}
	})
	w.waitFor("web", "Ready at v1@"+v1, func(app *plumbv1.App) bool {
		return app.Status.LastAppliedRevision == "v1@"+v1
	})

	if r := w.plumb("diff", "web", "-n", ns, "--allow-insecure-registries"); r.code != 0 || !strings.Contains(r.stdout, "v1@"+v1) {
		t.Errorf("plumb diff on the converged App: %s\nwant exit 0 and the revision v1@%s", r, v1)
	}
	for rev, want := range map[string]string{"v2": "v2@" + v2, "tags/v2": "v2@" + v2, v2: v2, "v2@" + v2: v2} {
		t.Run(rev, func(t *testing.T) {
			report, r := w.diffJSON("web", "--revision", rev, "--allow-insecure-registries")
			if r.code != 1 {
				t.Errorf("exit %d, want 1\n%s", r.code, r)
			}
			if diff := cmp.Diff(map[string]string{"ConfigMap/web": "update .data.greeting"}, changed(report)); diff != "" {
				t.Errorf("changed objects (-want +got):\n%s", diff)
			}
			if report.Revision != want {
				t.Errorf("revision %q, want %q", report.Revision, want)
			}
		})
	}
	for _, tc := range []struct{ rev, want string }{
		{"not a tag!", "an OCI App's revision is a tag"},
		{"sha256:abc", "64 hex digits"},
		{"v9", "not found"},
	} {
		if r := w.plumb("diff", "web", "-n", ns, "--revision", tc.rev, "--allow-insecure-registries"); r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("--revision %q: %s\nwant exit 2 and %q", tc.rev, r, tc.want)
		}
	}
	// A working copy reads nothing of the registry: no account is needed.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "configmap.yaml"), []byte(configMap(ns, "web", map[string]string{"greeting": "hallo"})), 0o644); err != nil {
		t.Fatal(err)
	}
	if report, r := w.diffJSON("web", "--path", dir, "--allow-insecure-registries"); r.code != 1 ||
		!cmp.Equal(changed(report), map[string]string{"ConfigMap/web": "update .data.greeting"}) || report.Revision != "working-copy" {
		t.Errorf("--path of an OCI App with an account: %s\nwant exit 1, web's greeting, at working-copy", r)
	}
	// As a controller without --allow-insecure-registries would tick.
	if r := w.plumb("diff", "web", "-n", ns); r.code != 2 || !strings.Contains(r.stderr, "--allow-insecure-registries") {
		t.Errorf("plumb diff without --allow-insecure-registries: %s\nwant exit 2 naming the flag", r)
	}
}
