package e2e

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

// TestALockedDownControllerActsAsEachNamespacesServiceAccount runs the
// plumb binary as a user that may write none of the objects Apps render,
// with --default-service-account and --no-cross-namespace: an App that
// names no ServiceAccount is applied as its namespace's "deployer", a
// render reaching out of the namespace is refused whole, and a file://
// source is refused with the flag that would allow it.
func TestALockedDownControllerActsAsEachNamespacesServiceAccount(t *testing.T) {
	setUp(t)
	ctx := context.Background()
	ns := newNamespace(t)
	read := []string{"get", "list", "watch"}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "plumb-locked-down"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"plumb.dev"}, Resources: []string{"apps", "apps/status", "apps/finalizers"}, Verbs: []string{"*"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, Verbs: []string{"impersonate", "get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps", "secrets"}, Verbs: read},
	}}
	objs := []client.Object{role,
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "plumb-locked-down"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "plumb-locked-down"}}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "deployer"}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "deployer"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "deployer"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "deployer"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "deployer"}}},
	}
	for _, obj := range objs {
		if err := k8s.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	kubeconfig, _, err := cluster.AddUser("plumb-locked-down", nil)
	if err != nil {
		t.Fatal(err)
	}
	p := startController(t, "locked-down", "--kubeconfig", kubeconfig, "--leader-elect=false", "--app-label-selector=e2e-shard=tenancy",
		"--default-service-account=deployer", "--no-cross-namespace")
	defer func() {
		if t.Failed() {
			t.Logf("locked-down controller's log:\n%s", p.tail(100))
		}
		p.stop()
	}()
	shard := func(a *plumbv1.App) { a.Labels = map[string]string{"e2e-shard": "tenancy"} }

	_, url, first := gitRepo(t, map[string]string{"deploy/config.yaml": configMapYAML("settings", "blue")})
	createApp(t, ns, "mine", url, shard)
	readyAt(t, ns, "mine", first)
	if cm, ok := getConfigMap(t, ns, "settings"); !ok || cm.Data["color"] != "blue" {
		t.Fatalf("the ConfigMap applied as the ServiceAccount is %v", cm)
	}

	_, url, _ = gitRepo(t, map[string]string{"deploy/elsewhere.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: planted\n  namespace: default\n"})
	createApp(t, ns, "reaching", url, shard)
	msg := findCondition(notReady(t, ns, "reaching", plumbv1.ReasonReadFailed), plumbv1.ConditionReady).Message
	if !strings.Contains(msg, "ConfigMap/default/planted (namespace default)") || !strings.Contains(msg, "--no-cross-namespace") {
		t.Errorf("Ready message %q does not name the object and the rule", msg)
	}

	createApp(t, ns, "local", "file:///etc/plumb-other-tenant.git", shard)
	msg = findCondition(notReady(t, ns, "local", plumbv1.ReasonReadFailed), plumbv1.ConditionReady).Message
	if !strings.Contains(msg, "--allow-file-sources") {
		t.Errorf("Ready message %q does not name --allow-file-sources", msg)
	}
}
