package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// An App whose source is an OCI artifact in a real registry converges at
// the tag's digest, has a drift healed through the informer, and follows
// the tag when it moves (the controller runs with
// --allow-insecure-registries: the test registry speaks plain HTTP).
func TestAnOCIAppConvergesIsHealedAndFollowsItsTag(t *testing.T) {
	setUp(t)
	ns := newNamespace(t)
	ctx := context.Background()
	registry := testenv.StartRegistry(t)
	first := registry.PushFiles(t, "e2e/web", "stable", map[string]string{"deploy/config.yaml": configMapYAML("settings", "blue")})
	secret := registrySecret(t, ns, registry)
	app := &plumbv1.App{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "oci"},
		Spec: plumbv1.AppSpec{
			Source: plumbv1.Source{Path: "deploy", OCI: &plumbv1.OCISource{URL: registry.URL("e2e/web"),
				Ref: plumbv1.OCIRef{Tag: "stable"}, Insecure: true, SecretRef: &plumbv1.LocalObjectReference{Name: secret.Name}}},
			Interval: &metav1.Duration{Duration: 10 * time.Minute},
		},
	}
	if err := k8s.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
	if got := readyAt(t, ns, "oci", first); got.Status.LastAppliedRevision != "stable@"+first {
		t.Fatalf("applied %q, want stable@%s", got.Status.LastAppliedRevision, first)
	}

	cm, _ := getConfigMap(t, ns, "settings")
	cm.Data["color"] = "hacked"
	if err := k8s.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the drift to be healed", func() (bool, string) {
		cm, _ := getConfigMap(t, ns, "settings")
		return cm.Data["color"] == "blue", "color is " + cm.Data["color"]
	})

	moved := registry.PushFiles(t, "e2e/web", "stable", map[string]string{"deploy/config.yaml": configMapYAML("settings", "green")})
	requestSync(t, ns, "oci")
	readyAt(t, ns, "oci", moved)
	if cm, _ := getConfigMap(t, ns, "settings"); cm.Data["color"] != "green" {
		t.Errorf("after the tag moved, color is %q, want green", cm.Data["color"])
	}
}

// registrySecret creates a dockerconfigjson Secret with the registry's
// account.
func registrySecret(t *testing.T, ns string, registry *testenv.Registry) *corev1.Secret {
	t.Helper()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "registry"}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: registry.DockerConfig()}}
	if err := k8s.Create(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	return secret
}

// harborPush is Harbor's PUSH_ARTIFACT event for repo (host/path) at tag,
// from the receiver's own fixture.
func harborPush(t *testing.T, repo, tag, digest string) []byte {
	t.Helper()
	data, err := os.ReadFile("../webhook/testdata/harbor/push-artifact.json")
	if err != nil {
		t.Fatal(err)
	}
	var payload map[string]any
	if err := json.Unmarshal(data, &payload); err != nil {
		t.Fatal(err)
	}
	payload["event_data"].(map[string]any)["resources"] = []map[string]any{
		{"digest": digest, "tag": tag, "resource_url": repo + ":" + tag}}
	body, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// A registry's push webhook brings an OCI App with a semver range to the
// pushed tag at once: the App's timer is an hour away, and the tag list the
// App's last tick read is younger than its 30 seconds, so only a webhook
// that makes the tick list the tags again can move it.
func TestAHarborPushBringsASemverAppToTheNewTag(t *testing.T) {
	setUp(t)
	ns := newNamespace(t)
	ctx := context.Background()
	registry := testenv.StartRegistry(t)
	first := registry.PushFiles(t, "e2e/shop", "1.0.0", map[string]string{"config.yaml": configMapYAML("settings", "blue")})
	secret := registrySecret(t, ns, registry)
	app := &plumbv1.App{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ranged"},
		Spec: plumbv1.AppSpec{
			Source: plumbv1.Source{OCI: &plumbv1.OCISource{URL: registry.URL("e2e/shop"),
				Ref: plumbv1.OCIRef{SemVer: ">=1.0.0 <2.0.0"}, Insecure: true, SecretRef: &plumbv1.LocalObjectReference{Name: secret.Name}}},
			Interval: &metav1.Duration{Duration: time.Hour},
		},
	}
	if err := k8s.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
	if got := readyAt(t, ns, "ranged", first); got.Status.LastAppliedRevision != "1.0.0@"+first {
		t.Fatalf("applied %q, want 1.0.0@%s", got.Status.LastAppliedRevision, first)
	}

	second := registry.PushFiles(t, "e2e/shop", "1.1.0", map[string]string{"config.yaml": configMapYAML("settings", "green")})
	body := harborPush(t, registry.Host+"/e2e/shop", "1.1.0", second)
	if code, answer := postHook(t, "harbor", map[string]string{"Authorization": "not-the-secret"}, body); code != http.StatusUnauthorized {
		t.Fatalf("a Harbor push with another secret: %d %q, want 401", code, answer)
	}
	if code, answer := postHook(t, "harbor", map[string]string{"Authorization": webhookSecret}, body); code != http.StatusAccepted || !strings.Contains(answer, "matched 1 apps") {
		t.Fatalf("the Harbor push: %d %q, want 202 matching one App", code, answer)
	}
	if got := readyAt(t, ns, "ranged", second); got.Status.LastAppliedRevision != "1.1.0@"+second {
		t.Errorf("applied %q, want 1.1.0@%s", got.Status.LastAppliedRevision, second)
	}
	if cm, _ := getConfigMap(t, ns, "settings"); cm.Data["color"] != "green" {
		t.Errorf("after the push, color is %q, want green", cm.Data["color"])
	}
}
