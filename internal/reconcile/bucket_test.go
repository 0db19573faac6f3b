package reconcile

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/queue"
)

// bucketConfigMap is a ConfigMap manifest.
func bucketConfigMap(name, value string) string {
	return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\ndata:\n  value: \"" + value + "\"\n"
}

// An App whose source is a prefix of a real S3 bucket converges at
// sha256:<listing digest>, with the access key pair of its Secret; an
// unchanged tick is one LIST and no download; an object added under the
// prefix is applied and one removed is pruned; an outage fails the Read
// phase and keeps the last good state.
func TestAnAppFromABucketConvergesAndKeepsItsLastGoodState(t *testing.T) {
	ctx := context.Background()
	s3 := testenv.StartS3(t)
	s3.CreateBucket(t, "deploy")
	s3.Put(t, "deploy", map[string]string{"prod/a.yaml": bucketConfigMap("a", "1"), "staging/x.yaml": bucketConfigMap("x", "1")})
	h := newHarnessAs(t, cluster.Config, Policy{AllowInsecureRegistries: true})
	app := newApp(t, "unused", func(a *plumbv1.App) {
		a.Spec.Source = plumbv1.Source{Bucket: &plumbv1.BucketSource{Endpoint: s3.Endpoint, Bucket: "deploy", Prefix: "prod", Insecure: true,
			SecretRef: &plumbv1.LocalObjectReference{Name: "s3"}}}
		noWait(a)
	})
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: app.Namespace, Name: "s3"},
		StringData: map[string]string{"accesskey": s3.AccessKey, "secretkey": s3.SecretKey}}
	if err := admin(t).Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(app)
	cm := func(name string) error {
		return admin(t).Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: name}, &corev1.ConfigMap{})
	}

	got := h.tick(t, key, queue.WakeTimer)
	ready(t, got)
	first := got.Status.LastAppliedRevision
	if !strings.HasPrefix(first, "sha256:") || cm("a") != nil || cm("x") == nil {
		t.Fatalf("applied %q (a: %v, x: %v); want sha256:<digest>, a applied and x (outside the prefix) not", first, cm("a"), cm("x"))
	}
	h.registry.Reset()
	ready(t, h.tick(t, key, queue.WakeTimer))
	if n := h.registry.Reset(); n["GET other"] != 1 || len(n) != 1 {
		t.Errorf("an unchanged tick asked the S3 server %v, want one LIST (GET other) and nothing else", n)
	}

	s3.Put(t, "deploy", map[string]string{"prod/b.yaml": bucketConfigMap("b", "1")})
	s3.Remove(t, "deploy", "prod/a.yaml")
	got = h.tick(t, key, queue.WakeTimer)
	ready(t, got)
	if got.Status.LastAppliedRevision == first || cm("b") != nil {
		t.Fatalf("after a change: applied %q (was %s), b: %v; want a new revision with b", got.Status.LastAppliedRevision, first, cm("b"))
	}
	waitGone(t, admin(t), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: "a"}})
	applied := got.Status.LastAppliedRevision

	s3.Stop(t)
	got = h.tick(t, key, queue.WakeTimer)
	failed(t, got, PhaseRead, plumbv1.ReasonReadFailed, "SourceUnavailable")
	if got.Status.LastAppliedRevision != applied || cm("b") != nil {
		t.Errorf("after a failed read: applied %q (want %s kept), b: %v (want it kept)", got.Status.LastAppliedRevision, applied, cm("b"))
	}
	if msg := phaseStatus(got, PhaseRead).LastError; strings.Contains(msg, s3.SecretKey) {
		t.Errorf("the Read phase's error shows the secret key: %s", msg)
	}
}

// A bucket over plain HTTP is refused unless the controller allows it,
// and a Secret without the key pair fails clearly.
func TestABucketsRefusalsAreClear(t *testing.T) {
	ctx := context.Background()
	insecure := newApp(t, "unused", func(a *plumbv1.App) {
		a.Spec.Source = plumbv1.Source{Bucket: &plumbv1.BucketSource{Endpoint: "s3.invalid", Bucket: "deploy", Insecure: true}}
	})
	got := newHarness(t).tick(t, client.ObjectKeyFromObject(insecure), queue.WakeTimer)
	if msg := failed(t, got, PhaseRead, plumbv1.ReasonReadFailed, "SourceRefused"); !strings.Contains(msg, "--allow-insecure-registries") {
		t.Errorf("Ready message %q does not name the flag", msg)
	}

	keyless := newApp(t, "unused", func(a *plumbv1.App) {
		a.Spec.Source = plumbv1.Source{Bucket: &plumbv1.BucketSource{Endpoint: "s3.invalid", Bucket: "deploy", SecretRef: &plumbv1.LocalObjectReference{Name: "s3"}}}
	})
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: keyless.Namespace, Name: "s3"}, StringData: map[string]string{"username": "u"}}
	if err := admin(t).Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	got = newHarness(t).tick(t, client.ObjectKeyFromObject(keyless), queue.WakeTimer)
	if msg := failed(t, got, PhaseRead, plumbv1.ReasonReadFailed, "SourceUnavailable"); !strings.Contains(msg, "accesskey and secretkey") {
		t.Errorf("Ready message %q does not name the keys", msg)
	}
}
