package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/impersonation"
	"github.com/plumb-dev/plumb/internal/repourl"
	"github.com/plumb-dev/plumb/internal/source/git"
	"github.com/plumb-dev/plumb/internal/syncorder"
	"github.com/plumb-dev/plumb/ssa"
)

// Policy is what the controller lets an App do beyond what RBAC decides
// (the controller's lockdown flags).
type Policy struct {
	// DefaultServiceAccount is the ServiceAccount, in the App's own
	// namespace, that an App naming none acts as. Empty: such an App acts
	// with the controller's own rights.
	DefaultServiceAccount string
	// NoCrossNamespace refuses, in the Read phase, a render that places a
	// namespaced object outside the App's namespace or holds a
	// cluster-scoped object, and a spec.dependsOn on an App of another
	// namespace.
	NoCrossNamespace bool
	// AllowFileSources lets Apps read file:// repositories, which are on the
	// controller's own disk.
	AllowFileSources bool
	// AllowInsecureRegistries lets Apps read OCI registries, Helm
	// repositories and S3 buckets over plain HTTP (an insecure field, an
	// http:// URL).
	AllowInsecureRegistries bool
	// NoRemoteClusters refuses Apps that name another cluster
	// (spec.destination): they fail the Observe phase.
	NoRemoteClusters bool
}

// Identities gives the Applier that acts as a ServiceAccount in an App's
// namespace (package impersonation) and forgets an App that acts as none.
type Identities interface {
	For(ctx context.Context, app types.NamespacedName, serviceAccount string) (Applier, error)
	Release(app types.NamespacedName)
}

// ServiceAccountOf is the ServiceAccount an App acts as under the policy
// ("" for the controller's own rights).
func (p Policy) ServiceAccountOf(app *plumbv1.App) string {
	if app.Spec.ServiceAccountName != "" {
		return app.Spec.ServiceAccountName
	}
	return p.DefaultServiceAccount
}

// serviceAccountOf is the ServiceAccount an App acts as ("" for the
// controller's own rights).
func (r *Reconciler) serviceAccountOf(app *plumbv1.App) string { return r.Policy.ServiceAccountOf(app) }

// applierFor is the Applier that acts for app: as its ServiceAccount, or
// with the controller's own rights when it has none. A ServiceAccount that
// cannot be acted as fails the Apply phase, before any request about the
// App's objects.
func (r *Reconciler) applierFor(ctx context.Context, app *plumbv1.App, target *Target) (Applier, error) {
	key := client.ObjectKeyFromObject(app)
	sa := r.serviceAccountOf(app)
	if sa == "" {
		if target.Identities != nil {
			target.Identities.Release(key)
		}
		return target.Applier, nil
	}
	fail := func(detail string, err error) error {
		return &PhaseError{Phase: PhaseApply, Reason: plumbv1.ReasonApplyFailed, Detail: detail, Err: err}
	}
	if problems := validation.IsDNS1123Subdomain(sa); len(problems) > 0 {
		return nil, fail("ServiceAccountUnavailable", fmt.Errorf("%q is not a ServiceAccount name: %s", sa, strings.Join(problems, "; ")))
	}
	if target.Identities == nil {
		return nil, fail("ServiceAccountUnavailable", fmt.Errorf("the App acts as ServiceAccount %s/%s, but this controller cannot impersonate", app.Namespace, sa))
	}
	applier, err := target.Identities.For(ctx, key, sa)
	switch {
	case errors.Is(err, impersonation.ErrServiceAccountNotFound):
		return nil, fail("ServiceAccountNotFound", err)
	case err != nil:
		return nil, fail("ServiceAccountUnavailable", err)
	}
	return applier, nil
}

// refuseFileSource refuses a file:// repository unless the controller
// allows them: it would be read from the controller's own disk.
// An OCI or Helm source over plain HTTP is refused unless the controller
// allows insecure registries, and so is a chart dependency's repository
// in spec.helm.repositories.
func (r *Reconciler) refuseFileSource(app *plumbv1.App) error {
	refuse := func(err error) error {
		return &PhaseError{Phase: PhaseRead, Reason: plumbv1.ReasonReadFailed, Detail: "SourceRefused", Terminal: true, Err: err}
	}
	if h := app.Spec.Helm; h != nil && !r.Policy.AllowInsecureRegistries {
		for _, repo := range h.Repositories {
			if repo.Insecure || strings.HasPrefix(repo.URL, "http://") {
				return refuse(fmt.Errorf("helm.repositories: %s is read over plain HTTP (an http:// URL or insecure), which is refused: "+
					"anyone on the path could change what is applied (start plumb controller with --allow-insecure-registries to allow it)", repourl.WithoutCredentials(repo.URL)))
			}
		}
	}
	if b := app.Spec.Source.Bucket; b != nil {
		if b.Insecure && !r.Policy.AllowInsecureRegistries {
			return refuse(errors.New("bucket.insecure asks for plain HTTP to the S3 server, which is refused: anyone on the path could change what is applied " +
				"(start plumb controller with --allow-insecure-registries to allow it)"))
		}
		return nil
	}
	if o := app.Spec.Source.OCI; o != nil {
		if o.Insecure && !r.Policy.AllowInsecureRegistries {
			return refuse(errors.New("oci.insecure asks for a plain HTTP registry, which is refused: anyone on the path could change what is applied " +
				"(start plumb controller with --allow-insecure-registries to allow it)"))
		}
		return nil
	}
	if h := app.Spec.Source.Helm; h != nil {
		if (h.Insecure || strings.HasPrefix(h.Repository, "http://")) && !r.Policy.AllowInsecureRegistries {
			return refuse(errors.New("the Helm repository is read over plain HTTP (an http:// URL or helm.insecure), which is refused: " +
				"anyone on the path could change what is applied (start plumb controller with --allow-insecure-registries to allow it)"))
		}
		return nil
	}
	if r.Policy.AllowFileSources || !git.IsLocal(app.Spec.Source.GitRepository().URL) {
		return nil
	}
	return refuse(errors.New("file:// sources are refused: the repository would be read from the controller's own disk " +
		"(start plumb controller with --allow-file-sources to allow them)"))
}

// checkNamespaces enforces NoCrossNamespace on the prepared render (every
// namespaced object has its namespace, cluster-scoped ones none): the whole
// render is refused, naming each object that breaks the rule, before
// anything is applied or pruned.
func (r *Reconciler) checkNamespaces(app *plumbv1.App, desired []*unstructured.Unstructured, revision string) error {
	if !r.Policy.NoCrossNamespace {
		return nil
	}
	var offending []string
	for _, obj := range desired {
		switch ns := obj.GetNamespace(); {
		case ns == "":
			offending = append(offending, idOf(obj).String()+" (cluster-scoped)")
		case ns != app.Namespace:
			offending = append(offending, fmt.Sprintf("%s (namespace %s)", idOf(obj), ns))
		}
	}
	if len(offending) == 0 {
		return nil
	}
	count := len(offending)
	offending = cutList(offending)
	return &PhaseError{Phase: PhaseRead, Reason: plumbv1.ReasonReadFailed, Detail: "PolicyViolation",
		Err: fmt.Errorf("%s at %s breaks --no-cross-namespace (an App may place objects only in its own namespace %s and no cluster-scoped objects); "+
			"nothing was applied or pruned. %d objects: %s", displayPath(app.Spec.Source.Path), revision, app.Namespace, count, strings.Join(offending, ", "))}
}

// authorize asks, before the first write of a tick that acts as a
// ServiceAccount, whether it may make every write the tick plans: the
// applies (patch, and create for a new object), the patches that remove
// additions, and the prunes. One refusal fails the tick before anything is
// applied or pruned, so that a commit is never half applied because RBAC
// refuses a part of it. A tick that writes nothing asks nothing.
func (s *pass) authorize(ctx context.Context, serviceAccount string) error {
	r, app, applier, p, desired, live, kinds := s.r, s.app, s.applier, s.planned, s.desired, s.live, s.kinds
	var writes, deletes []ssa.Access
	plurals := pluralsOf(desired)
	for _, obj := range p.apply {
		access := ssa.Access{Verb: "patch", Object: obj}
		if scope, ok := kinds.pending[obj.GroupVersionKind()]; ok {
			// Its CRD comes with this apply: ask with the CRD's names.
			access.Resource = plurals[obj.GroupVersionKind().GroupKind()]
			access.Namespaced = scope == meta.RESTScopeNameNamespace
		}
		writes = append(writes, access)
		if live[idOf(obj)] == nil {
			access.Verb = "create"
			writes = append(writes, access)
		}
	}
	for id, d := range p.drifted {
		if !p.left[id] && len(d.additions) > 0 && d.live != nil {
			writes = append(writes, ssa.Access{Verb: "patch", Object: d.live.Identity()})
		}
	}
	if s.runsHooks() {
		writes = append(writes, hookAccesses(s.order.hooks)...)
	}
	if app.Spec.PruneEnabled() {
		owner := ssa.Owner{Name: app.Name, Namespace: app.Namespace}
		for _, obj := range s.stale() {
			live, err := r.live(ctx, s.target, obj)
			if err == nil && (live == nil || !owner.OwnsLive(live)) {
				continue // gone, or not the App's any more: Prune only drops it from the inventory
			}
			if err == nil {
				if _, kept := ssa.PruneGuardLive(live); kept {
					continue
				}
			}
			deletes = append(deletes, ssa.Access{Verb: "delete", Object: obj})
		}
	}
	user := impersonation.Username(app.Namespace, serviceAccount)
	for _, check := range []struct {
		accesses []ssa.Access
		reason   string
	}{{writes, plumbv1.ReasonApplyFailed}, {deletes, plumbv1.ReasonPruneFailed}} {
		if len(check.accesses) == 0 {
			continue
		}
		denied, err := applier.Denied(ctx, user, check.accesses)
		if err != nil {
			return &PhaseError{Phase: PhaseApply, Reason: check.reason, Err: err}
		}
		if len(denied) > 0 {
			denied = cutList(denied)
			return &PhaseError{Phase: PhaseApply, Reason: check.reason, Err: fmt.Errorf("%s; nothing was applied or pruned", strings.Join(denied, "; "))}
		}
	}
	return nil
}

// hookAccesses are what running hooks asks of the API server: hooks are
// created, read and deleted as the ServiceAccount too.
func hookAccesses(hooks []hookObject) []ssa.Access {
	var out []ssa.Access
	for _, h := range hooks {
		verbs := []string{"create", "get"}
		if h.obj.GetName() != "" && h.place.Has(syncorder.BeforeHookCreation) || h.place.Has(syncorder.HookSucceeded) || h.place.Has(syncorder.HookFailed) {
			verbs = append(verbs, "delete")
		}
		for _, verb := range verbs {
			out = append(out, ssa.Access{Verb: verb, Object: h.obj})
		}
	}
	return out
}

// authorizeHooks asks, before a deleted App's delete hooks run as its
// ServiceAccount, whether it may run every one of them.
func (s *pass) authorizeHooks(ctx context.Context, serviceAccount string, hooks []hookObject) error {
	denied, err := s.applier.Denied(ctx, impersonation.Username(s.app.Namespace, serviceAccount), hookAccesses(hooks))
	if err != nil {
		return err
	}
	if len(denied) > 0 {
		return fmt.Errorf("%s; no delete hook was run", strings.Join(cutList(denied), "; "))
	}
	return nil
}

// pluralsOf maps the kinds that the CRDs in a render define to their
// resource names.
func pluralsOf(desired []*unstructured.Unstructured) map[schema.GroupKind]string {
	out := map[schema.GroupKind]string{}
	for _, o := range desired {
		if !isCRD(o) {
			continue
		}
		group, _, _ := unstructured.NestedString(o.Object, "spec", "group")
		kind, _, _ := unstructured.NestedString(o.Object, "spec", "names", "kind")
		plural, _, _ := unstructured.NestedString(o.Object, "spec", "names", "plural")
		out[schema.GroupKind{Group: group, Kind: kind}] = plural
	}
	return out
}
