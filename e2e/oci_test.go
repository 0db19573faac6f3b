package e2e

import (
	"context"
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
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "registry"}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: registry.DockerConfig()}}
	if err := k8s.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
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
