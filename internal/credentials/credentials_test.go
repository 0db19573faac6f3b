package credentials

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/plumb-dev/plumb/internal/testenv"
)

var cluster *testenv.Cluster

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.Needs{Cluster: testenv.ModeAPI}, func(e *testenv.Env) { cluster = e.Cluster })
}

// counted is a clientset whose requests are recorded.
func counted(t *testing.T, cfg *rest.Config) (kubernetes.Interface, func() []string) {
	t.Helper()
	log := &testenv.RequestLog{}
	c, err := kubernetes.NewForConfig(log.Wrap(cfg))
	if err != nil {
		t.Fatal(err)
	}
	return c, log.Take
}

func namespaceWithSecrets(t *testing.T, admin kubernetes.Interface, values map[string]string) string {
	t.Helper()
	ctx := context.Background()
	ns, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "credentials-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for name, value := range values {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, StringData: map[string]string{"password": value}}
		if _, err := admin.CoreV1().Secrets(ns.Name).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return ns.Name
}

func TestASecretIsWatchedAloneAndReadWithoutRequests(t *testing.T) {
	admin := kubernetes.NewForConfigOrDie(cluster.Config)
	ns := namespaceWithSecrets(t, admin, map[string]string{"git": "one", "unrelated": "not-for-plumb"})
	other := namespaceWithSecrets(t, admin, map[string]string{"git": "another-namespace"})
	client, requests := counted(t, cluster.Config)
	var changed sync.Map // App → how many times it was told
	c := New(client, func(app types.NamespacedName) {
		n, _ := changed.LoadOrStore(app, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
	})
	defer c.Stop()
	ctx := context.Background()
	app := types.NamespacedName{Namespace: ns, Name: "web"}

	s, err := c.Get(ctx, app, "git")
	if err != nil || string(s.Data["password"]) != "one" {
		t.Fatalf("Get = %v, %v", s, err)
	}
	for _, r := range requests() {
		if strings.Contains(r, "/secrets") && !strings.Contains(r, "fieldSelector=metadata.name%3Dgit") &&
			!strings.HasSuffix(strings.SplitN(r, "?", 2)[0], "/secrets/git") {
			t.Errorf("a request for Secrets beyond the one named: %s", r)
		}
	}
	// Until the watch has listed the Secret, a Get reads it directly; then
	// never again.
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_ = requests()
		if _, err := c.Get(ctx, app, "git"); err != nil {
			return false, err
		}
		return len(requests()) == 0, nil
	})
	if err != nil {
		t.Fatalf("every Get made a request, 30 s after the first: %v", err)
	}
	for range 3 {
		if _, err := c.Get(ctx, app, "git"); err != nil {
			t.Fatal(err)
		}
	}
	if got := requests(); len(got) != 0 {
		t.Errorf("Gets once the watch listed the Secret made requests: %v", got)
	}

	t.Run("an App gets the Secret of its own namespace", func(t *testing.T) {
		s, err := c.Get(ctx, types.NamespacedName{Namespace: other, Name: "web"}, "git")
		if err != nil || string(s.Data["password"]) != "another-namespace" {
			t.Errorf("Get in %s = %v, %v", other, s, err)
		}
	})

	t.Run("a change is seen", func(t *testing.T) {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "git"}, StringData: map[string]string{"password": "two"}}
		if _, err := admin.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			got, err := c.Get(ctx, app, "git")
			return err == nil && string(got.Data["password"]) == "two", nil
		})
		if err != nil {
			t.Error("the cache never showed the new password")
		}
		// The App that uses it is told, so that it ticks with it.
		err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			n, ok := changed.Load(app)
			return ok && n.(*atomic.Int32).Load() == 1, nil
		})
		if err != nil {
			t.Error("the App that uses the changed Secret was not told once")
		}
		if _, ok := changed.Load(types.NamespacedName{Namespace: other, Name: "web"}); ok {
			t.Error("an App of another namespace was told")
		}
	})

	t.Run("a missing Secret is NotFound", func(t *testing.T) {
		if _, err := c.Get(ctx, app, "nope"); !apierrors.IsNotFound(err) {
			t.Errorf("Get of a missing Secret = %v, want NotFound", err)
		}
	})

	t.Run("watches stop when no App uses their Secret", func(t *testing.T) {
		c.Release(app) // it used "nope" last
		c.Release(types.NamespacedName{Namespace: other, Name: "web"})
		if got := c.Watched(); got != 0 {
			t.Errorf("%d Secrets watched after every App released, want 0", got)
		}
	})
}

func TestWithoutListAndWatchRightsTheSecretIsRead(t *testing.T) {
	admin := kubernetes.NewForConfigOrDie(cluster.Config)
	ns := namespaceWithSecrets(t, admin, map[string]string{"git": "one"})
	ctx := context.Background()
	_, cfg, err := cluster.AddUser("get-only", nil)
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "get-secrets"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}}}}
	if _, err := admin.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "get-secrets"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "User", Name: "get-only"}}}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c := New(kubernetes.NewForConfigOrDie(cfg), nil)
	defer c.Stop()
	timeout, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s, err := c.Get(timeout, types.NamespacedName{Namespace: ns, Name: "web"}, "git")
	if err != nil || string(s.Data["password"]) != "one" {
		t.Fatalf("Get with get rights only = %v, %v", s, err)
	}
}

// An App may use two Secrets at once (its registry's credentials and its
// verification keys); Release keeps the ones it still names.
func TestAnAppUsesTwoSecretsAndReleasesOnlyTheOneItDropped(t *testing.T) {
	admin := kubernetes.NewForConfigOrDie(cluster.Config)
	ns := namespaceWithSecrets(t, admin, map[string]string{"registry": "one", "keys": "two"})
	c := New(admin, nil)
	defer c.Stop()
	ctx := context.Background()
	app := types.NamespacedName{Namespace: ns, Name: "web"}
	for _, name := range []string{"registry", "keys"} {
		if _, err := c.Get(ctx, app, name); err != nil {
			t.Fatal(err)
		}
	}
	c.Release(app, "registry", "keys")
	if got := c.Watched(); got != 2 {
		t.Fatalf("%d Secrets watched for an App that uses two, want 2", got)
	}
	c.Release(app, "registry")
	if got := c.Watched(); got != 1 {
		t.Errorf("%d Secrets watched after the App dropped its keys, want 1", got)
	}
	if s, err := c.Get(ctx, app, "registry"); err != nil || string(s.Data["password"]) != "one" {
		t.Errorf("the Secret kept: %v, %v", s, err)
	}
	c.Release(app)
	if got := c.Watched(); got != 0 {
		t.Errorf("%d Secrets watched after the App released all, want 0", got)
	}
}
