package reconcile

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/source/git/gittest"
	"github.com/plumb-dev/plumb/queue"
)

// The tests of this file run the tick as a restricted controller user: it
// may read what it watches and write Apps and Events, may impersonate
// ServiceAccounts, and may write none of the objects Apps render. Whatever
// an App gets applied, its ServiceAccount's RBAC allowed.

var controllerUsers atomic.Int64

// restrictedController provisions a controller user with only the rights
// plumb needs when every App acts as a ServiceAccount, and returns its
// config.
func restrictedController(t *testing.T) *rest.Config {
	t.Helper()
	ctx := context.Background()
	c := admin(t)
	name := fmt.Sprintf("plumb-tenancy-%d", controllerUsers.Add(1))
	read := []string{"get", "list", "watch"}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"plumb.dev"}, Resources: []string{"apps", "apps/status", "apps/finalizers"}, Verbs: []string{"*"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, Verbs: []string{"impersonate", "get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps", "secrets", "namespaces"}, Verbs: read},
		{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: read},
		{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: read},
		{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"clusterrolebindings"}, Verbs: read},
		{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"}, Verbs: read},
	}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: name}}}
	for _, obj := range []client.Object{role, binding} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	_, cfg, err := cluster.AddUser(name, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// serviceAccount creates ServiceAccount name in ns, bound to a Role that
// grants verbs on ConfigMaps, Secrets and Deployments in ns.
func serviceAccount(t *testing.T, ns, name string, verbs ...string) {
	t.Helper()
	ctx := context.Background()
	c := admin(t)
	objs := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps", "secrets"}, Verbs: verbs},
			{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: verbs},
		}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}}},
	}
	for _, obj := range objs {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
}

var allVerbs = []string{"get", "list", "watch", "create", "update", "patch", "delete"}

// failed fails the test unless the App is not Ready for reason and detail,
// and returns the Ready message.
func failed(t *testing.T, app *plumbv1.App, phase Phase, reason, detail string) string {
	t.Helper()
	cond := apimeta.FindStatusCondition(app.Status.Conditions, plumbv1.ConditionReady)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != reason {
		t.Fatalf("Ready = %+v, want False with reason %s", cond, reason)
	}
	if ps := phaseStatus(app, phase); ps.Reason != detail {
		t.Errorf("the %s phase's reason = %q, want %q", phase, ps.Reason, detail)
	}
	return cond.Message
}

const deploymentYAML = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: api
spec:
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec:
      containers: [{name: api, image: example.com/api:1}]
`

const escalationYAML = `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: tenant-is-cluster-admin
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects: [{kind: Group, name: system:authenticated, apiGroup: rbac.authorization.k8s.io}]
`

func TestAnAppActsAsItsServiceAccountAndGetsNoMoreRightsThanIt(t *testing.T) {
	ctx := context.Background()
	c := admin(t)
	w, repo := newRepo(t, map[string]string{
		"deploy/api.yaml":    deploymentYAML,
		"deploy/config.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: config\ndata: {k: v}\n",
		"deploy/old.yaml":    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: old\n",
	})
	app := newApp(t, repo, func(a *plumbv1.App) { a.Spec.ServiceAccountName = "deployer"; noWait(a) })
	key := client.ObjectKeyFromObject(app)
	serviceAccount(t, app.Namespace, "deployer", allVerbs...)
	h := newHarnessAs(t, restrictedController(t), Policy{})

	// The controller's user may write none of these: they were applied as the ServiceAccount.
	ready(t, h.tick(t, key, queue.WakeTimer))
	before := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: app.Namespace, Name: "config"}, before); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: app.Namespace, Name: "api"}, &metav1.PartialObjectMetadata{
		TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}}); err != nil {
		t.Fatalf("the Deployment was not applied: %v", err)
	}

	// An unchanged tick asks nothing about its objects, as for an App with the controller's rights.
	waitCached(t, h, before)
	ready(t, h.tick(t, key, queue.WakeTimer))
	h.counter.Reset()
	ready(t, h.tick(t, key, queue.WakeEvent))
	if reqs := append(h.counter.Matching("/configmaps"), append(h.counter.Matching("/deployments"), h.counter.Matching("accessreviews")...)...); len(reqs) != 0 {
		t.Errorf("an unchanged tick as the ServiceAccount made requests about its objects: %v", reqs)
	}

	// One commit changes the ConfigMap, removes another, and grants
	// cluster-admin to everyone: nothing of it is applied or pruned.
	escalation := map[string]string{
		"deploy/config.yaml":   "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: config\ndata: {k: changed}\n",
		"deploy/old.yaml":      "",
		"deploy/escalate.yaml": escalationYAML,
	}
	pushed(t, w, escalation)
	h.counter.Reset()
	got := h.tick(t, key, queue.WakeTimer)
	msg := failed(t, got, PhaseApply, plumbv1.ReasonApplyFailed, plumbv1.ReasonApplyFailed)
	for _, want := range []string{"clusterrolebindings", "system:serviceaccount:" + app.Namespace + ":deployer", "forbidden", "nothing was applied or pruned"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Ready message %q does not name %q", msg, want)
		}
	}
	err := c.Get(ctx, client.ObjectKey{Name: "tenant-is-cluster-admin"}, &rbacv1.ClusterRoleBinding{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("the ClusterRoleBinding exists (or %v): the App escalated through the controller", err)
	}
	after := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(before), after); err != nil || after.ResourceVersion != before.ResourceVersion {
		t.Errorf("the ConfigMap changed (resourceVersion %s → %s, %v): the commit was half applied", before.ResourceVersion, after.ResourceVersion, err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: app.Namespace, Name: "old"}, &corev1.ConfigMap{}); err != nil {
		t.Errorf("the ConfigMap that left Git was pruned by the refused tick: %v", err)
	}
	if writes := append(h.counter.Matching("PATCH /api/"), append(h.counter.Matching("PATCH /apis/rbac"), h.counter.Matching("DELETE ")...)...); len(writes) != 0 {
		t.Errorf("the refused tick wrote %v", writes)
	}
	if inventoryHas(got, "ClusterRoleBinding", "tenant-is-cluster-admin") {
		t.Error("the refused ClusterRoleBinding entered the inventory: no later tick could prune it")
	}

	// Git drops the escalation: the rest of the commit converges, and the
	// App can still be deleted (its finalizer prunes as the ServiceAccount).
	pushed(t, w, map[string]string{"deploy/escalate.yaml": ""})
	ready(t, h.tick(t, key, queue.WakeTimer))
	waitGone(t, c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: app.Namespace, Name: "old"}})
	if err := c.Delete(ctx, app); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool {
		_, _ = h.r.Tick(ctx, key, queue.WakeTimer)
		return apierrors.IsNotFound(c.Get(ctx, key, &plumbv1.App{}))
	})
	waitGone(t, c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: app.Namespace, Name: "config"}})
}

func TestTheDefaultServiceAccountAndNoCrossNamespaceHoldAnAppInItsNamespace(t *testing.T) {
	ctx := context.Background()
	c := admin(t)
	other := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "victim-"}}
	if err := c.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	secretYAML := "apiVersion: v1\nkind: Secret\nmetadata:\n  name: planted\n  namespace: " + other.Name + "\nstringData: {k: v}\n"
	w, repo := newRepo(t, map[string]string{
		"deploy/mine.yaml":   "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: mine\n",
		"deploy/theirs.yaml": secretYAML,
	})
	app := newApp(t, repo, nil) // names no ServiceAccount
	key := client.ObjectKeyFromObject(app)
	serviceAccount(t, app.Namespace, "tenant", allVerbs...)
	controllerUser := restrictedController(t)

	t.Run("--default-service-account: RBAC refuses the other namespace", func(t *testing.T) {
		h := newHarnessAs(t, controllerUser, Policy{DefaultServiceAccount: "tenant"})
		got := h.tick(t, key, queue.WakeTimer)
		msg := failed(t, got, PhaseApply, plumbv1.ReasonApplyFailed, plumbv1.ReasonApplyFailed)
		for _, want := range []string{"secrets", "system:serviceaccount:" + app.Namespace + ":tenant", other.Name} {
			if !strings.Contains(msg, want) {
				t.Errorf("Ready message %q does not name %q", msg, want)
			}
		}
		if err := c.Get(ctx, client.ObjectKey{Namespace: other.Name, Name: "planted"}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
			t.Errorf("the Secret was planted in the other namespace (or %v)", err)
		}
	})

	t.Run("--no-cross-namespace: the render is refused before any request", func(t *testing.T) {
		h := newHarnessAs(t, controllerUser, Policy{DefaultServiceAccount: "tenant", NoCrossNamespace: true})
		h.counter.Reset()
		got := h.tick(t, key, queue.WakeTimer)
		msg := failed(t, got, PhaseRead, plumbv1.ReasonReadFailed, "PolicyViolation")
		if !strings.Contains(msg, "Secret/"+other.Name+"/planted (namespace "+other.Name+")") || !strings.Contains(msg, "--no-cross-namespace") {
			t.Errorf("Ready message %q does not name the object and the rule", msg)
		}
		aboutObjects := func() []string {
			return append(h.counter.Matching("/configmaps"), h.counter.Matching("/namespaces/"+other.Name+"/")...)
		}
		if reqs := aboutObjects(); len(reqs) != 0 {
			t.Errorf("a refused render made requests about the App's objects: %v", reqs)
		}
		// An unchanged tick afterwards asks nothing about them either.
		h.counter.Reset()
		got = h.tick(t, key, queue.WakeTimer)
		failed(t, got, PhaseRead, plumbv1.ReasonReadFailed, "PolicyViolation")
		if reqs := aboutObjects(); len(reqs) != 0 {
			t.Errorf("an unchanged refused tick made requests about the App's objects: %v", reqs)
		}
	})

	t.Run("an accepted render's unchanged tick asks nothing", func(t *testing.T) {
		h := newHarnessAs(t, controllerUser, Policy{DefaultServiceAccount: "tenant", NoCrossNamespace: true})
		pushed(t, w, map[string]string{"deploy/theirs.yaml": ""})
		ready(t, h.tick(t, key, queue.WakeTimer))
		mine := &corev1.ConfigMap{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: app.Namespace, Name: "mine"}, mine); err != nil {
			t.Fatal(err)
		}
		waitCached(t, h, mine)
		ready(t, h.tick(t, key, queue.WakeTimer))
		h.counter.Reset()
		ready(t, h.tick(t, key, queue.WakeEvent))
		if reqs := h.counter.Take(); len(reqs) != 0 {
			t.Errorf("an unchanged tick made %d requests: %v", len(reqs), reqs)
		}
	})

	t.Run("--no-cross-namespace refuses cluster-scoped objects", func(t *testing.T) {
		_, repo := newRepo(t, map[string]string{"deploy/escalate.yaml": escalationYAML})
		app := newApp(t, repo, nil)
		h := newHarnessAs(t, controllerUser, Policy{NoCrossNamespace: true})
		got := h.tick(t, client.ObjectKeyFromObject(app), queue.WakeTimer)
		msg := failed(t, got, PhaseRead, plumbv1.ReasonReadFailed, "PolicyViolation")
		if !strings.Contains(msg, "ClusterRoleBinding.rbac.authorization.k8s.io/tenant-is-cluster-admin (cluster-scoped)") {
			t.Errorf("Ready message %q does not name the cluster-scoped object", msg)
		}
	})
}

func TestPruneAndTheFinalizersPruneActAsTheServiceAccount(t *testing.T) {
	ctx := context.Background()
	c := admin(t)
	w, app, h := convergedWithoutDelete(t)
	key := client.ObjectKeyFromObject(app)

	pushed(t, w, map[string]string{"deploy/b.yaml": ""})
	got := h.tick(t, key, queue.WakeTimer)
	msg := failed(t, got, PhaseApply, plumbv1.ReasonPruneFailed, plumbv1.ReasonPruneFailed)
	if !strings.Contains(msg, "cannot delete") || !strings.Contains(msg, "system:serviceaccount:"+app.Namespace+":no-delete") {
		t.Errorf("Ready message %q does not say the ServiceAccount may not delete", msg)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: app.Namespace, Name: "b"}, &corev1.ConfigMap{}); err != nil {
		t.Errorf("the ConfigMap whose prune RBAC refused is gone: %v", err)
	}
	if !inventoryHas(got, "ConfigMap", "b") {
		t.Error("the ConfigMap not pruned left the inventory: no later tick would prune it")
	}

	// The App is deleted: its finalizer's prune is refused the same way.
	if err := c.Delete(ctx, got); err != nil {
		t.Fatal(err)
	}
	h.recorded()
	eventually(t, func() bool { // once the App cache has seen the deletion
		h.tick(t, key, queue.WakeTimer)
		return countContaining(h.recorded(), "Warning PruneFailed", "cannot delete", "no-delete") == 1
	})
	for _, name := range []string{"a", "b"} {
		if err := c.Get(ctx, client.ObjectKey{Namespace: app.Namespace, Name: name}, &corev1.ConfigMap{}); err != nil {
			t.Errorf("ConfigMap %s is gone although RBAC refused its prune: %v", name, err)
		}
	}
	stuck := &plumbv1.App{}
	if err := c.Get(ctx, key, stuck); err != nil {
		t.Errorf("the App is gone although its objects were not pruned: %v", err)
	}
}

func TestAMissingServiceAccountFailsNamingItUntilItExists(t *testing.T) {
	_, repo := newRepo(t, map[string]string{"deploy/a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n"})
	app := newApp(t, repo, func(a *plumbv1.App) { a.Spec.ServiceAccountName = "ghost" })
	key := client.ObjectKeyFromObject(app)
	h := newHarnessAs(t, restrictedController(t), Policy{})
	h.counter.Reset()
	got := h.tick(t, key, queue.WakeTimer)
	msg := failed(t, got, PhaseApply, plumbv1.ReasonApplyFailed, "ServiceAccountNotFound")
	if !strings.Contains(msg, app.Namespace+"/ghost") {
		t.Errorf("Ready message %q does not name the ServiceAccount", msg)
	}
	if reqs := h.counter.Matching("/configmaps"); len(reqs) != 0 {
		t.Errorf("requests about the App's objects were made without its ServiceAccount: %v", reqs)
	}
	serviceAccount(t, app.Namespace, "ghost", allVerbs...)
	// The ServiceAccount cache sees it soon; until then the tick fails the same way.
	eventually(t, func() bool {
		got = h.tick(t, key, queue.WakeTimer)
		cond := apimeta.FindStatusCondition(got.Status.Conditions, plumbv1.ConditionReady)
		return cond != nil && cond.Status == metav1.ConditionTrue
	})
}

func TestFileSourcesAreRefusedUnlessTheControllerAllowsThem(t *testing.T) {
	app := newApp(t, "unused", func(a *plumbv1.App) { a.Spec.Source.URL = "file:///var/lib/other-tenant/repo.git" })
	key := client.ObjectKeyFromObject(app)
	controllerUser := restrictedController(t)
	got := newHarnessAs(t, controllerUser, Policy{}).tick(t, key, queue.WakeTimer)
	msg := failed(t, got, PhaseRead, plumbv1.ReasonReadFailed, "SourceRefused")
	if !strings.Contains(msg, "--allow-file-sources") {
		t.Errorf("Ready message %q does not name the flag", msg)
	}
	if cond := apimeta.FindStatusCondition(got.Status.Conditions, plumbv1.ConditionStalled); cond == nil || cond.Status != metav1.ConditionTrue {
		t.Errorf("Stalled = %+v: a refused source needs a change of spec or flags, not retries", cond)
	}
	// Spellings that Git reads from the local disk too (the API server
	// refuses the last; the controller does not count on that).
	for _, url := range []string{"FILE:///var/lib/other-tenant/repo.git", `git@host:\/../../var/lib/other-tenant/repo.git`} {
		r := &Reconciler{}
		if err := r.refuseFileSource(&plumbv1.App{Spec: plumbv1.AppSpec{Source: plumbv1.Source{URL: url}}}); err == nil {
			t.Errorf("%s was not refused", url)
		}
	}
	allowed := newHarnessAs(t, controllerUser, Policy{AllowFileSources: true}).tick(t, key, queue.WakeTimer)
	if ps := phaseStatus(allowed, PhaseRead); ps.Reason == "SourceRefused" {
		t.Errorf("with --allow-file-sources the source is still refused: %s", ps.LastError)
	}
}

func TestADeletedAppWhoseServiceAccountIsGoneLeavesItsObjects(t *testing.T) {
	ctx := context.Background()
	c := admin(t)
	_, repo := newRepo(t, map[string]string{"deploy/a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n"})
	app := newApp(t, repo, func(a *plumbv1.App) { a.Spec.ServiceAccountName = "deployer" })
	key := client.ObjectKeyFromObject(app)
	serviceAccount(t, app.Namespace, "deployer", allVerbs...)
	h := newHarnessAs(t, restrictedController(t), Policy{})
	ready(t, h.tick(t, key, queue.WakeTimer))

	// As when its namespace is deleted: the ServiceAccount goes first.
	if err := c.Delete(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: app.Namespace, Name: "deployer"}}); err != nil {
		t.Fatal(err)
	}
	events := deleteAndFinalize(t, h, app)
	if n := countContaining(events, "Warning Orphaned", app.Namespace+"/deployer"); n != 1 {
		t.Errorf("Orphaned Events naming the ServiceAccount = %d, want 1; all: %q", n, events)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: app.Namespace, Name: "a"}, &corev1.ConfigMap{}); err != nil {
		t.Errorf("the App's object is gone: it was pruned without its ServiceAccount (%v)", err)
	}
}

func TestAnEntryThatIsGoneNeedsNoRightToDeleteIt(t *testing.T) {
	ctx := context.Background()
	c := admin(t)
	w, app, h := convergedWithoutDelete(t)
	key := client.ObjectKeyFromObject(app)

	// Someone deletes b by hand, then Git drops it: nothing is left to delete.
	b := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: app.Namespace, Name: "b"}}
	if err := c.Delete(ctx, b); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool {
		got, _ := h.r.Observer.Get(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, app.Namespace, "b")
		return got == nil
	})
	pushed(t, w, map[string]string{"deploy/b.yaml": ""})
	got := h.tick(t, key, queue.WakeTimer)
	ready(t, got)
	if inventoryHas(got, "ConfigMap", "b") {
		t.Error("the entry of the object that is gone stayed in the inventory")
	}
}

var widgetCRD = crdYAML("tenancy.plumb.dev", "Widget", "widgets", "Namespaced")

func TestAnObjectWhoseCRDComesAlongIsAskedAboutBeforeTheCRDIsApplied(t *testing.T) {
	ctx := context.Background()
	c := admin(t)
	_, repo := newRepo(t, map[string]string{
		"deploy/crd.yaml":    widgetCRD,
		"deploy/widget.yaml": "apiVersion: tenancy.plumb.dev/v1\nkind: Widget\nmetadata:\n  name: w\n",
	})
	app := newApp(t, repo, func(a *plumbv1.App) { a.Spec.ServiceAccountName = "crd-only" })
	serviceAccount(t, app.Namespace, "crd-only", allVerbs...)
	// The ServiceAccount may manage CRDs, not Widgets.
	name := "crd-only-" + app.Namespace
	for _, obj := range []client.Object{
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"}, Verbs: allVerbs}}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: app.Namespace, Name: "crd-only"}}},
	} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	h := newHarnessAs(t, restrictedController(t), Policy{})
	got := h.tick(t, client.ObjectKeyFromObject(app), queue.WakeTimer)
	msg := failed(t, got, PhaseApply, plumbv1.ReasonApplyFailed, plumbv1.ReasonApplyFailed)
	if !strings.Contains(msg, `cannot create resource "widgets" in API group "tenancy.plumb.dev"`) {
		t.Errorf("Ready message %q does not name the refused Widget", msg)
	}
	crd := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"}}
	if err := c.Get(ctx, client.ObjectKey{Name: "widgets.tenancy.plumb.dev"}, crd); !apierrors.IsNotFound(err) {
		t.Errorf("the CRD was applied although the Widget of the same commit is refused (%v): half applied", err)
	}
}

// convergedWithoutDelete is an App with ConfigMaps a and b that acts as
// ServiceAccount "no-delete" (every verb but delete on them), ticked once by
// a restricted controller.
func convergedWithoutDelete(t *testing.T) (*gittest.Workdir, *plumbv1.App, *harness) {
	t.Helper()
	w, repo := newRepo(t, map[string]string{"deploy/a.yaml": configMapYAML("a"), "deploy/b.yaml": configMapYAML("b")})
	app := newApp(t, repo, func(a *plumbv1.App) { a.Spec.ServiceAccountName = "no-delete" })
	serviceAccount(t, app.Namespace, "no-delete", "get", "list", "watch", "create", "update", "patch")
	h := newHarnessAs(t, restrictedController(t), Policy{})
	ready(t, h.tick(t, client.ObjectKeyFromObject(app), queue.WakeTimer))
	return w, app, h
}
