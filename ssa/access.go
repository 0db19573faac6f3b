package ssa

import (
	"context"
	"fmt"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Access is one request a tick is about to make: a verb on an object.
// Resource and Namespaced name the object's resource where the server does
// not serve its kind yet (its CRD comes with the same apply); otherwise the
// RESTMapper does.
type Access struct {
	Verb       string
	Object     *unstructured.Unstructured
	Resource   string
	Namespaced bool
}

// Denied asks the API server's authorizer, with one SelfSubjectAccessReview
// per access, which of them the client's user may not make, and describes
// each refusal as the API server would (resource, name, verb, namespace or
// cluster scope). user names the user in the descriptions. Accesses to
// kinds the server does not serve yet (their CRD comes with the same
// apply) cannot be asked about and are skipped.
func (m *Manager) Denied(ctx context.Context, user string, accesses []Access) ([]string, error) {
	var denied []string
	for _, a := range accesses {
		gvk := a.Object.GroupVersionKind()
		resourceName, namespaced := a.Resource, a.Namespaced
		if resourceName == "" {
			mapping, err := m.client.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
			if meta.IsNoMatchError(err) {
				continue
			}
			if err != nil {
				return nil, err
			}
			resourceName, namespaced = mapping.Resource.Resource, mapping.Scope.Name() == meta.RESTScopeNameNamespace
		}
		attrs := &authorizationv1.ResourceAttributes{Verb: a.Verb, Group: gvk.Group, Version: gvk.Version,
			Resource: resourceName, Name: a.Object.GetName()}
		where := "at the cluster scope"
		if namespaced {
			attrs.Namespace = a.Object.GetNamespace()
			where = fmt.Sprintf("in the namespace %q", attrs.Namespace)
		}
		review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: attrs}}
		if err := m.client.Create(ctx, review); err != nil {
			return nil, fmt.Errorf("asking whether %s may %s %s: %w", user, a.Verb, describe(a.Object), err)
		}
		if review.Status.Allowed {
			continue
		}
		resource := resourceName
		if gvk.Group != "" {
			resource += "." + gvk.Group
		}
		denied = append(denied, fmt.Sprintf("%s %q is forbidden: User %q cannot %s resource %q in API group %q %s",
			resource, a.Object.GetName(), user, a.Verb, resourceName, gvk.Group, where))
	}
	return denied, nil
}
