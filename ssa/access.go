package ssa

import (
	"context"
	"fmt"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Access is one request a tick is about to make: a verb on an object.
type Access struct {
	Verb   string
	Object *unstructured.Unstructured
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
		mapping, err := m.client.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
		if meta.IsNoMatchError(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		attrs := &authorizationv1.ResourceAttributes{Verb: a.Verb, Group: gvk.Group, Version: gvk.Version,
			Resource: mapping.Resource.Resource, Name: a.Object.GetName()}
		where := "at the cluster scope"
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
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
		resource := mapping.Resource.Resource
		if gvk.Group != "" {
			resource += "." + gvk.Group
		}
		denied = append(denied, fmt.Sprintf("%s %q is forbidden: User %q cannot %s resource %q in API group %q %s",
			resource, a.Object.GetName(), user, a.Verb, mapping.Resource.Resource, gvk.Group, where))
	}
	return denied, nil
}
