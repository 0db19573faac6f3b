// Package crd holds the CustomResourceDefinitions (App, Notification) that
// controller-gen generates from api/v1alpha1 (`make generate`), and installs
// them.
package crd

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

//go:embed plumb.dev_apps.yaml
var appsYAML []byte

//go:embed plumb.dev_notifications.yaml
var notificationsYAML []byte

// FieldManager is the server-side apply field manager that Install uses.
const FieldManager = "plumb"

// YAML returns the generated App CRD manifest.
func YAML() []byte { return append([]byte(nil), appsYAML...) }

// NotificationYAML returns the generated Notification CRD manifest.
func NotificationYAML() []byte { return append([]byte(nil), notificationsYAML...) }

// App returns the generated App CRD as a typed object.
func App() (*apiextensionsv1.CustomResourceDefinition, error) { return parse(appsYAML) }

func parse(manifest []byte) (*apiextensionsv1.CustomResourceDefinition, error) {
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(manifest, &crd); err != nil {
		return nil, fmt.Errorf("parsing a generated CRD: %w", err)
	}
	return &crd, nil
}

// Install applies every CRD with server-side apply and waits until the API
// server serves them (condition Established).
func Install(ctx context.Context, cfg *rest.Config) error {
	client, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("building an apiextensions client: %w", err)
	}
	for _, manifest := range [][]byte{appsYAML, notificationsYAML} {
		if err := install(ctx, client, manifest); err != nil {
			return err
		}
	}
	return nil
}

func install(ctx context.Context, client apiextensionsclient.Interface, manifest []byte) error {
	crd, err := parse(manifest)
	if err != nil {
		return err
	}
	body, err := yaml.YAMLToJSON(manifest)
	if err != nil {
		return fmt.Errorf("converting CRD %s to JSON: %w", crd.Name, err)
	}
	crds := client.ApiextensionsV1().CustomResourceDefinitions()
	_, err = crds.Patch(ctx, crd.Name, types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: FieldManager, Force: ptr.To(true)})
	if err != nil {
		return fmt.Errorf("applying CRD %s: %w", crd.Name, err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := crds.Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for CRD %s to be established: %w", crd.Name, err)
	}
	return nil
}
