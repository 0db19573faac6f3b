package e2e

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

func TestAGitOutageKeepsTheLastStateAndRecoversOnItsOwn(t *testing.T) {
	setUp(t)
	ns := newNamespace(t)
	w, direct, first := gitRepo(t, map[string]string{
		"deploy/config.yaml": configMapYAML("settings", "blue"),
		"deploy/extra.yaml":  configMapYAML("extra", "green"),
	})
	u, err := url.Parse(direct)
	if err != nil {
		t.Fatal(err)
	}
	proxy := startProxy(t, u.Host)
	u.Host = proxy.addr
	createApp(t, ns, "outage", u.String(), func(a *plumbv1.App) { a.Spec.Interval = &metav1.Duration{Duration: 10 * time.Second} })
	readyAt(t, ns, "outage", first)

	proxy.down()
	second := commit(t, w, map[string]string{"deploy/extra.yaml": ""}) // would prune extra
	requestSync(t, ns, "outage")
	app := notReady(t, ns, "outage", plumbv1.ReasonReadFailed)
	if app.Status.Phases.Read.Reason != "SourceUnavailable" || !strings.Contains(app.Status.Phases.Read.LastError, proxy.addr) {
		t.Errorf("read phase during the outage: %+v", app.Status.Phases.Read)
	}
	if _, exists := getConfigMap(t, ns, "extra"); !exists {
		t.Errorf("an object was pruned while Git was unreachable")
	}

	proxy.up(t) // no sync request: the fallback timer (backoff capped at 10s) recovers
	readyAt(t, ns, "outage", second)
	eventually(t, 30*time.Second, "extra to be pruned after recovery", func() (bool, string) {
		_, exists := getConfigMap(t, ns, "extra")
		return !exists, "extra still exists"
	})
}

func TestAnImmutableFieldChangeFailsTheApplyWithTheAPIServersMessage(t *testing.T) {
	setUp(t)
	ns := newNamespace(t)
	frozen := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: frozen\nimmutable: true\ndata:\n  k: %s\n"
	w, url, first := gitRepo(t, map[string]string{"deploy/frozen.yaml": strings.Replace(frozen, "%s", "one", 1)})
	createApp(t, ns, "frozen", url, nil)
	readyAt(t, ns, "frozen", first)
	commit(t, w, map[string]string{"deploy/frozen.yaml": strings.Replace(frozen, "%s", "two", 1)})
	requestSync(t, ns, "frozen")
	app := notReady(t, ns, "frozen", plumbv1.ReasonApplyFailed)
	msg := findCondition(app, plumbv1.ConditionReady).Message
	if !strings.Contains(msg, "field is immutable") || !strings.Contains(msg, "frozen") {
		t.Errorf("Ready message %q lacks the API server's immutable-field message", msg)
	}
	if cm, _ := getConfigMap(t, ns, "frozen"); cm.Data["k"] != "one" {
		t.Errorf("the immutable ConfigMap changed to %q", cm.Data["k"])
	}
}

func TestAKindThePlumbCredentialsMayNotTouchFailsNamingIt(t *testing.T) {
	setUp(t)
	ns := newNamespace(t)
	// A controller whose credentials may manage ConfigMaps but not Services.
	kubeconfig, _, err := cluster.AddUser("plumb-restricted", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "plumb-restricted"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"plumb.dev"}, Resources: []string{"apps", "apps/status", "apps/finalizers"}, Verbs: []string{"*"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"*"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "plumb-restricted"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "User", Name: "plumb-restricted"}}}
	if err := k8s.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
	restricted := startController(t, "restricted", "--kubeconfig", kubeconfig, "--leader-elect=false", "--app-label-selector=e2e-shard=rbac")
	defer func() {
		if t.Failed() {
			t.Logf("restricted controller's log:\n%s", restricted.tail(100))
		}
		restricted.stop()
	}()

	_, url, _ := gitRepo(t, map[string]string{
		"deploy/config.yaml":  configMapYAML("settings", "blue"),
		"deploy/service.yaml": "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  ports: [{port: 80}]\n",
	})
	createApp(t, ns, "rbac", url, func(a *plumbv1.App) { a.Labels = map[string]string{"e2e-shard": "rbac"} })
	app := notReady(t, ns, "rbac", plumbv1.ReasonObserveFailed)
	msg := findCondition(app, plumbv1.ConditionReady).Message
	if !strings.Contains(msg, "Service") || !strings.Contains(msg, "forbidden") {
		t.Errorf("Ready message %q does not name the forbidden kind", msg)
	}
	if _, exists := getConfigMap(t, ns, "settings"); exists {
		t.Errorf("a partial apply happened although Observe failed")
	}
}
