package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// settingsChart is a chart of one ConfigMap, <release>-settings, of the
// chart's color.
func settingsChart(color string) map[string]string {
	return map[string]string{
		"values.yaml": fmt.Sprintf("color: %s\n", color),
		"templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-settings\n" +
			"data:\n  color: {{ .Values.color | quote }}\n",
	}
}

// An App whose source is a chart of a real Helm repository (behind basic
// auth) converges at <version>@sha256:<archive>, has a drift healed
// through the informer, and takes a new version in its range (the
// controller runs with --allow-insecure-registries: the test repository
// speaks plain HTTP).
func TestAHelmAppConvergesIsHealedAndFollowsItsRange(t *testing.T) {
	setUp(t)
	ns := newNamespace(t)
	ctx := context.Background()
	repo := testenv.StartHelmRepository(t, testenv.HelmRepositoryOptions{Username: "e2e", Password: "s3cret-charts"})
	first := repo.Publish(t, "web", "1.0.0", settingsChart("blue"))
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "charts"},
		StringData: map[string]string{"username": repo.Username, "password": repo.Password}}
	if err := k8s.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	app := &plumbv1.App{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "helm"},
		Spec: plumbv1.AppSpec{
			Source: plumbv1.Source{Helm: &plumbv1.HelmSource{Repository: repo.URL, Chart: "web", Version: "^1",
				SecretRef: &plumbv1.LocalObjectReference{Name: secret.Name}}},
			Interval: &metav1.Duration{Duration: 10 * time.Minute},
		},
	}
	if err := k8s.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
	if got := readyAt(t, ns, "helm", first); got.Status.LastAppliedRevision != "1.0.0@sha256:"+first {
		t.Fatalf("applied %q, want 1.0.0@sha256:%s", got.Status.LastAppliedRevision, first)
	}

	cm, _ := getConfigMap(t, ns, "helm-settings")
	cm.Data["color"] = "hacked"
	if err := k8s.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the drift to be healed", func() (bool, string) {
		cm, _ := getConfigMap(t, ns, "helm-settings")
		return cm.Data["color"] == "blue", "color is " + cm.Data["color"]
	})

	moved := repo.Publish(t, "web", "1.1.0", settingsChart("green"))
	requestSync(t, ns, "helm")
	readyAt(t, ns, "helm", moved)
	if cm, _ := getConfigMap(t, ns, "helm-settings"); cm.Data["color"] != "green" {
		t.Errorf("after 1.1.0 was published, color is %q, want green", cm.Data["color"])
	}
}
