package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/source/bucket"
	"github.com/plumb-dev/plumb/internal/source/tree"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// An App whose source is a prefix of a real S3 bucket (versitygw)
// converges at sha256:<digest of the listing>, has a drift healed through
// the informer, and takes a changed object on a sync (the controller runs
// with --allow-insecure-registries: the test server speaks plain HTTP).
func TestABucketAppConvergesIsHealedAndFollowsItsObjects(t *testing.T) {
	setUp(t)
	ns := newNamespace(t)
	ctx := context.Background()
	s3 := testenv.StartS3(t)
	s3.CreateBucket(t, "deploy")
	settings := func(color string) map[string]string {
		return map[string]string{"web/settings.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  color: " + color + "\n"}
	}
	s3.Put(t, "deploy", settings("blue"))
	loc := bucket.Location{Endpoint: s3.Endpoint, Bucket: "deploy", Prefix: "web", Insecure: true}
	auth := bucket.Auth{AccessKey: s3.AccessKey, SecretKey: s3.SecretKey}
	digest := func() string {
		listing, err := (&bucket.Client{AllowHTTP: true}).List(ctx, loc, auth, tree.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		return listing.Digest
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s3"},
		StringData: map[string]string{"accesskey": s3.AccessKey, "secretkey": s3.SecretKey}}
	if err := k8s.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	app := &plumbv1.App{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bucket"},
		Spec: plumbv1.AppSpec{
			Source: plumbv1.Source{Bucket: &plumbv1.BucketSource{Endpoint: s3.Endpoint, Bucket: "deploy", Prefix: "web", Insecure: true,
				SecretRef: &plumbv1.LocalObjectReference{Name: secret.Name}}},
			Interval: &metav1.Duration{Duration: 10 * time.Minute},
		},
	}
	if err := k8s.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
	first := digest()
	if got := readyAt(t, ns, "bucket", first); got.Status.LastAppliedRevision != first {
		t.Fatalf("applied %q, want %s", got.Status.LastAppliedRevision, first)
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

	s3.Put(t, "deploy", settings("green"))
	requestSync(t, ns, "bucket")
	readyAt(t, ns, "bucket", digest())
	if cm, _ := getConfigMap(t, ns, "settings"); cm.Data["color"] != "green" {
		t.Errorf("after the object changed, color is %q, want green", cm.Data["color"])
	}
}
