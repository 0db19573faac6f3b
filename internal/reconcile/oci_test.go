package reconcile

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/queue"
)

// ociApp makes an App that reads deploy/ of repository's tag v1 on
// registry, with the registry's account in a dockerconfigjson Secret.
func ociApp(t *testing.T, registry *testenv.Registry, repository string, insecure bool) client.ObjectKey {
	t.Helper()
	app := newApp(t, "unused", func(a *plumbv1.App) {
		a.Spec.Source = plumbv1.Source{Path: "deploy", OCI: &plumbv1.OCISource{URL: registry.URL(repository),
			Ref: plumbv1.OCIRef{Tag: "v1"}, Insecure: insecure, SecretRef: &plumbv1.LocalObjectReference{Name: "registry"}}}
		noWait(a)
	})
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: app.Namespace, Name: "registry"}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: registry.DockerConfig()}}
	if err := admin(t).Create(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	return client.ObjectKeyFromObject(app)
}

func TestAnAppFromAnOCIArtifactConvergesAndKeepsItsLastGoodState(t *testing.T) {
	ctx := context.Background()
	registry := testenv.StartRegistry(t)
	first := registry.PushFiles(t, "plumb/web", "v1", map[string]string{"deploy/a.yaml": configMapYAML("a")})
	h := newHarnessAs(t, cluster.Config, Policy{AllowInsecureRegistries: true})
	key := ociApp(t, registry, "plumb/web", true)

	got := h.tick(t, key, queue.WakeTimer)
	ready(t, got)
	if got.Status.LastAppliedRevision != "v1@"+first {
		t.Fatalf("applied %q, want v1@%s", got.Status.LastAppliedRevision, first)
	}
	var a corev1.ConfigMap
	if err := admin(t).Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: "a"}, &a); err != nil || a.Labels[plumbv1.LabelAppName] != key.Name {
		t.Fatalf("ConfigMap a: %v, labels %v", err, a.Labels)
	}

	// An unchanged tick asks the registry one manifest HEAD, and nothing else.
	h.registry.Reset()
	got = h.tick(t, key, queue.WakeTimer)
	ready(t, got)
	if n := h.registry.Reset(); !cmp.Equal(n, map[string]int{"HEAD manifests": 1}) {
		t.Errorf("an unchanged tick asked the registry %v, want one manifest HEAD", n)
	}

	// The tag moves: the new content is applied and what left it pruned.
	moved := registry.PushFiles(t, "plumb/web", "v1", map[string]string{"deploy/b.yaml": configMapYAML("b")})
	got = h.tick(t, key, queue.WakeTimer)
	ready(t, got)
	if got.Status.LastAppliedRevision != "v1@"+moved {
		t.Fatalf("applied %q after the tag moved, want v1@%s", got.Status.LastAppliedRevision, moved)
	}
	waitGone(t, admin(t), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: "a"}})

	// An outage fails the Read phase and keeps the last good state.
	registry.Stop(t)
	got = h.tick(t, key, queue.WakeTimer)
	failed(t, got, PhaseRead, plumbv1.ReasonReadFailed, "SourceUnavailable")
	if got.Status.LastAppliedRevision != "v1@"+moved {
		t.Errorf("after a failed read the applied revision is %q, want v1@%s kept", got.Status.LastAppliedRevision, moved)
	}
	var b corev1.ConfigMap
	if err := admin(t).Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: "b"}, &b); err != nil {
		t.Errorf("ConfigMap b after the outage: %v, want it kept", err)
	}
	if msg := phaseStatus(got, PhaseRead).LastError; strings.Contains(msg, registry.Password) {
		t.Errorf("the Read phase's error shows the registry's password: %s", msg)
	}
	registry.Start(t)
	ready(t, h.tick(t, key, queue.WakeTimer))
}

func TestAPlainHTTPRegistryIsRefusedUnlessTheControllerAllowsIt(t *testing.T) {
	registry := testenv.StartRegistry(t)
	registry.PushFiles(t, "plumb/web", "v1", map[string]string{"deploy/a.yaml": configMapYAML("a")})
	key := ociApp(t, registry, "plumb/web", true)
	got := newHarness(t).tick(t, key, queue.WakeTimer)
	msg := failed(t, got, PhaseRead, plumbv1.ReasonReadFailed, "SourceRefused")
	if !strings.Contains(msg, "--allow-insecure-registries") {
		t.Errorf("Ready message %q does not name the flag", msg)
	}
	if cond := apimeta.FindStatusCondition(got.Status.Conditions, plumbv1.ConditionStalled); cond == nil || cond.Status != metav1.ConditionTrue {
		t.Errorf("Stalled = %+v: a refused source needs a change of spec or flags, not retries", cond)
	}
	// Without oci.insecure the registry's plain HTTP is refused as the Read.
	plain := ociApp(t, registry, "plumb/web", false)
	got = newHarnessAs(t, cluster.Config, Policy{AllowInsecureRegistries: true}).tick(t, plain, queue.WakeTimer)
	if msg := failed(t, got, PhaseRead, plumbv1.ReasonReadFailed, "SourceUnavailable"); !strings.Contains(msg, "plain HTTP") {
		t.Errorf("Ready message %q does not say that plain HTTP was refused", msg)
	}
}

// An App that asks for a cosign signature applies only revisions a
// trusted key signed: an unsigned revision fails the Read phase
// (VerificationFailed, SourceVerified False) and nothing of it is applied,
// the last verified state stays, and once it is signed it is applied.
func TestAVerifiedAppAppliesOnlySignedRevisions(t *testing.T) {
	ctx := context.Background()
	registry := testenv.StartRegistry(t)
	signer := testenv.GenerateCosignKey(t)
	first := registry.PushFiles(t, "plumb/web", "v1", map[string]string{"deploy/a.yaml": configMapYAML("a")})
	registry.Sign(t, signer, "plumb/web", first)
	h := newHarnessAs(t, cluster.Config, Policy{AllowInsecureRegistries: true})
	key := ociApp(t, registry, "plumb/web", true)
	verifyWith := func(t *testing.T, secret string, data map[string][]byte) {
		t.Helper()
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: secret}, Data: data}
		if err := admin(t).Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		updateApp(t, h, key, func(app *plumbv1.App) {
			app.Spec.Source.OCI.Verify = &plumbv1.OCIVerification{Provider: plumbv1.VerifyProviderCosign, SecretRef: plumbv1.LocalObjectReference{Name: secret}}
		})
	}
	verified := func(t *testing.T, app *plumbv1.App, want metav1.ConditionStatus, reason, says string) {
		t.Helper()
		c := apimeta.FindStatusCondition(app.Status.Conditions, plumbv1.ConditionSourceVerified)
		if c == nil || c.Status != want || c.Reason != reason || !strings.Contains(c.Message, says) {
			t.Errorf("SourceVerified = %+v, want %s/%s saying %q", c, want, reason, says)
		}
	}

	verifyWith(t, "no-keys", map[string][]byte{"cosign.key": []byte("a private key is not a public one")})
	got := h.tick(t, key, queue.WakeTimer)
	if msg := failed(t, got, PhaseRead, plumbv1.ReasonReadFailed, "VerificationFailed"); !strings.Contains(msg, ".pub") {
		t.Errorf("a Secret without a .pub key: %q does not say what it lacks", msg)
	}
	verified(t, got, metav1.ConditionFalse, plumbv1.ReasonVerificationFailed, "no-keys")
	if err := admin(t).Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: "a"}, &corev1.ConfigMap{}); err == nil {
		t.Fatal("ConfigMap a was applied though the keys could not be read")
	}

	verifyWith(t, "keys", map[string][]byte{"cosign.pub": signer.Public})
	got = h.tick(t, key, queue.WakeTimer)
	ready(t, got)
	verified(t, got, metav1.ConditionTrue, plumbv1.ReasonVerified, "cosign.pub")
	if got.Status.LastAppliedRevision != "v1@"+first {
		t.Fatalf("applied %q, want v1@%s", got.Status.LastAppliedRevision, first)
	}
	h.registry.Reset()
	ready(t, h.tick(t, key, queue.WakeTimer))
	if n := h.registry.Reset(); !cmp.Equal(n, map[string]int{"HEAD manifests": 1}) {
		t.Errorf("an unchanged verified tick asked the registry %v, want one manifest HEAD", n)
	}

	// The tag moves to an unsigned artifact: nothing of it is applied.
	unsigned := registry.PushFiles(t, "plumb/web", "v1", map[string]string{"deploy/b.yaml": configMapYAML("b")})
	got = h.tick(t, key, queue.WakeTimer)
	if msg := failed(t, got, PhaseRead, plumbv1.ReasonReadFailed, "VerificationFailed"); !strings.Contains(msg, "not signed") {
		t.Errorf("the unsigned revision's message %q does not say it is not signed", msg)
	}
	verified(t, got, metav1.ConditionFalse, plumbv1.ReasonVerificationFailed, unsigned)
	if got.Status.LastAppliedRevision != "v1@"+first || got.Status.LastAttemptedRevision != "v1@"+unsigned {
		t.Errorf("applied %q, attempted %q; want v1@%s kept and v1@%s attempted", got.Status.LastAppliedRevision, got.Status.LastAttemptedRevision, first, unsigned)
	}
	if err := admin(t).Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: "a"}, &corev1.ConfigMap{}); err != nil {
		t.Errorf("ConfigMap a of the last verified revision: %v, want it kept", err)
	}
	if err := admin(t).Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: "b"}, &corev1.ConfigMap{}); err == nil {
		t.Error("ConfigMap b of the unsigned revision was applied")
	}

	// Signed after its push (as CI pipelines do): the next tick applies it.
	registry.Sign(t, signer, "plumb/web", unsigned)
	got = h.tick(t, key, queue.WakeTimer)
	ready(t, got)
	verified(t, got, metav1.ConditionTrue, plumbv1.ReasonVerified, unsigned)
	if got.Status.LastAppliedRevision != "v1@"+unsigned {
		t.Errorf("applied %q once signed, want v1@%s", got.Status.LastAppliedRevision, unsigned)
	}
	waitGone(t, admin(t), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: "a"}})

	// An App that stops asking for verification has no SourceVerified.
	updateApp(t, h, key, func(app *plumbv1.App) { app.Spec.Source.OCI.Verify = nil })
	got = h.tick(t, key, queue.WakeTimer)
	ready(t, got)
	if c := apimeta.FindStatusCondition(got.Status.Conditions, plumbv1.ConditionSourceVerified); c != nil {
		t.Errorf("SourceVerified = %+v after verify was removed, want none", c)
	}
}

// The Apps one registry push wakes share one listing of its tags: each
// tick's fresh read is served by a listing that started after this
// replica saw its sync request, though the ticks run one after another;
// a push seen after that listing lists again.
func TestTheAppsOnePushWakesShareOneListingOfTags(t *testing.T) {
	registry := testenv.StartRegistry(t)
	registry.PushFiles(t, "plumb/shared", "1.0.0", map[string]string{"deploy/a.yaml": configMapYAML("a")})
	h := newHarnessAs(t, cluster.Config, Policy{AllowInsecureRegistries: true})
	var keys []client.ObjectKey
	for range 3 {
		key := ociApp(t, registry, "plumb/shared", true)
		updateApp(t, h, key, func(app *plumbv1.App) { app.Spec.Source.OCI.Ref = plumbv1.OCIRef{SemVer: "1.x"} })
		ready(t, h.tick(t, key, queue.WakeTimer))
		keys = append(keys, key)
	}
	push := func(tag string) {
		t.Helper()
		registry.PushFiles(t, "plumb/shared", tag, map[string]string{"deploy/a.yaml": configMapYAML("a"), "deploy/b.yaml": configMapYAML("b")})
		request := time.Now().UTC().Format(time.RFC3339Nano)
		for _, key := range keys { // as the webhook receiver asks, and the App informer sees
			updateApp(t, h, key, func(app *plumbv1.App) {
				if app.Annotations == nil {
					app.Annotations = map[string]string{}
				}
				app.Annotations[plumbv1.AnnotationSyncRequestedAt] = request
			})
			h.r.SyncRequestSeen(key, request, time.Now())
		}
	}
	push("1.1.0")
	h.registry.Reset()
	for _, key := range keys {
		got := h.tick(t, key, queue.WakeEvent)
		ready(t, got)
		if !strings.HasPrefix(got.Status.LastAppliedRevision, "1.1.0@") {
			t.Errorf("%s applied %s after the push of 1.1.0", key, got.Status.LastAppliedRevision)
		}
	}
	if n := h.registry.Reset()["GET tags"]; n != 1 {
		t.Errorf("the three Apps the push woke listed the tags %d times, want 1", n)
	}
	push("1.2.0")
	got := h.tick(t, keys[0], queue.WakeEvent)
	if !strings.HasPrefix(got.Status.LastAppliedRevision, "1.2.0@") {
		t.Errorf("after a second push: applied %s, want 1.2.0", got.Status.LastAppliedRevision)
	}
	if n := h.registry.Reset()["GET tags"]; n != 1 {
		t.Errorf("a later push listed the tags %d times, want 1", n)
	}
}
