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

// plumb diff previews a bucket App as the bucket is now; --revision is
// refused (a bucket keeps no revisions); --path previews a working copy
// without the bucket's account (it reads nothing of the bucket).
func TestDiffOfABucketApp(t *testing.T) {
	w := newWorld(t, "cli-bucket", "--allow-insecure-registries")
	ns := w.ns
	s3 := testenv.StartS3(t)
	s3.CreateBucket(t, "deploy")
	s3.Put(t, "deploy", map[string]string{"prod/web/configmap.yaml": configMap(ns, "web", map[string]string{"greeting": "hello"})})
	credentials := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s3"},
		StringData: map[string]string{"accesskey": s3.AccessKey, "secretkey": s3.SecretKey}}
	if err := w.k8s.Create(context.Background(), credentials); err != nil {
		t.Fatal(err)
	}
	w.createApp("web", "web", func(app *plumbv1.App) {
		app.Spec.Source = plumbv1.Source{Path: "web", Bucket: &plumbv1.BucketSource{Endpoint: s3.Endpoint, Bucket: "deploy", Prefix: "prod",
			Insecure: true, SecretRef: &plumbv1.LocalObjectReference{Name: credentials.Name}}}
	})
	ready := w.waitFor("web", "Ready", func(app *plumbv1.App) bool {
		return strings.HasPrefix(app.Status.LastAppliedRevision, "sha256:")
	})

	if r := w.plumb("diff", "web", "-n", ns, "--allow-insecure-registries"); r.code != 0 || !strings.Contains(r.stdout, ready.Status.LastAppliedRevision) {
		t.Errorf("plumb diff on the converged App: %s\nwant exit 0 and the revision %s", r, ready.Status.LastAppliedRevision)
	}
	s3.Put(t, "deploy", map[string]string{"prod/web/configmap.yaml": configMap(ns, "web", map[string]string{"greeting": "bonjour"})})
	if report, r := w.diffJSON("web", "--allow-insecure-registries"); r.code != 1 ||
		!cmp.Equal(changed(report), map[string]string{"ConfigMap/web": "update .data.greeting"}) {
		t.Errorf("plumb diff after an object changed in the bucket: %s\nwant exit 1 and web's greeting", r)
	}
	if r := w.plumb("diff", "web", "-n", ns, "--revision", "sha256:abc", "--allow-insecure-registries"); r.code != 2 || !strings.Contains(r.stderr, "a bucket keeps no revisions") {
		t.Errorf("--revision of a bucket App: %s\nwant exit 2 saying a bucket keeps no revisions", r)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "configmap.yaml"), []byte(configMap(ns, "web", map[string]string{"greeting": "hallo"})), 0o644); err != nil {
		t.Fatal(err)
	}
	if report, r := w.diffJSON("web", "--path", dir, "--allow-insecure-registries"); r.code != 1 ||
		!cmp.Equal(changed(report), map[string]string{"ConfigMap/web": "update .data.greeting"}) || report.Revision != "working-copy" {
		t.Errorf("--path of a bucket App with an account: %s\nwant exit 1, web's greeting, at working-copy", r)
	}
}
