package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// remoteCluster is a second local control plane, a destination: its admin
// client, and ServiceAccount tokens that a kubeconfig Secret may carry.
type remoteCluster struct {
	*testenv.Cluster
	k8s       client.Client
	clientset kubernetes.Interface
}

func startRemoteCluster(t *testing.T) *remoteCluster {
	t.Helper()
	c, err := testenv.Start(context.Background(), testenv.Options{Mode: testenv.ModeAPI})
	if err != nil {
		t.Fatalf("starting the second control plane: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			c.WriteLogs(&testLogWriter{t}, 40)
		}
		_ = c.Stop()
	})
	clientset, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	return &remoteCluster{Cluster: c, k8s: c.Client(t), clientset: clientset}
}

// testLogWriter writes into the test's log.
type testLogWriter struct{ t *testing.T }

func (w *testLogWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// kubeconfig makes a ServiceAccount named name in kube-system, bound to
// cluster-admin, and returns a self-contained kubeconfig with a token of
// it.
func (r *remoteCluster) kubeconfig(t *testing.T, name string) []byte {
	t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: name}}
	if err := r.k8s.Create(ctx, sa); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "kube-system", Name: name}}}
	if err := r.k8s.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
	token, err := r.clientset.CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("requesting a token: %v", err)
	}
	return fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: b
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: b
  context: {cluster: b, user: %s}
current-context: b
`, r.Config.Host, base64.StdEncoding.EncodeToString(r.Config.CAData), name, token.Status.Token, name)
}

// An App in cluster A deploys into cluster B, named by a kubeconfig Secret:
// it applies there (and not in A), heals a drift made in B, prunes there,
// reports B unreachable while B's API server is stopped and recovers when
// it returns, while an App into A keeps ticking; a token rotated in the
// Secret is used (the old one revoked); and an App cannot name a Secret of
// another namespace.
func TestAnAppDeploysIntoAnotherCluster(t *testing.T) {
	setUp(t)
	ctx := context.Background()
	b := startRemoteCluster(t)
	ns := newNamespace(t)
	if err := b.k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	// B is on loopback, which the default blocked ranges hold; the
	// metadata range stays blocked.
	p := startController(t, "remote", "--leader-elect=false", "--app-label-selector=e2e-shard=remote",
		"--destination-block-default-cidrs=false", "--destination-blocked-cidrs=169.254.0.0/16")
	defer func() {
		if t.Failed() {
			t.Logf("log of the controller:\n%s", p.tail(80))
		}
		_ = p.stop()
	}()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cluster-b"},
		Data: map[string][]byte{"value": b.kubeconfig(t, "plumb-first")}}
	if err := k8s.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	w, url, first := gitRepo(t, map[string]string{
		"deploy/settings.yaml": configMapYAML("settings", "blue"),
		"deploy/extra.yaml":    configMapYAML("extra", "blue"),
	})
	remote := func(a *plumbv1.App) {
		a.Labels = map[string]string{"e2e-shard": "remote"}
		a.Spec.Destination = &plumbv1.Destination{KubeConfig: plumbv1.KubeConfigReference{SecretRef: plumbv1.SecretKeyReference{Name: "cluster-b"}}}
	}
	createApp(t, ns, "into-b", url, remote)
	createApp(t, ns, "into-a", url, func(a *plumbv1.App) {
		a.Labels = map[string]string{"e2e-shard": "remote"}
		a.Spec.TargetNamespace = ns + "-a"
	})
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns + "-a"}}); err != nil {
		t.Fatal(err)
	}
	if app := readyAt(t, ns, "into-b", first); app.Status.Destination != "cluster-b" {
		t.Errorf("status.destination = %q, want cluster-b", app.Status.Destination)
	}
	eventually(t, time.Minute, "into-b's Healthy condition to name B", func() (bool, string) {
		c := findCondition(getApp(t, ns, "into-b"), plumbv1.ConditionHealthy)
		return c.Status == metav1.ConditionTrue && strings.Contains(c.Message, "in the cluster of Secret cluster-b"), c.Message
	})
	readyAt(t, ns, "into-a", first)
	inB := func(name string) (*corev1.ConfigMap, bool) {
		cm := &corev1.ConfigMap{}
		err := b.k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, cm)
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return cm, err == nil
	}
	if cm, ok := inB("settings"); !ok || cm.Data["color"] != "blue" || cm.Labels[plumbv1.LabelAppName] != "into-b" {
		t.Fatalf("settings in cluster B: %v %v, want it applied by into-b", ok, cm.Data)
	}
	if _, ok := getConfigMap(t, ns, "settings"); ok {
		t.Error("into-b applied settings in cluster A too")
	}

	t.Run("a drift made in B is healed", func(t *testing.T) {
		cm, _ := inB("settings")
		drifted := time.Now()
		if err := b.k8s.Patch(ctx, cm, client.RawPatch(types.MergePatchType, []byte(`{"data":{"color":"drifted"}}`)), client.FieldOwner("kubectl-patch")); err != nil {
			t.Fatal(err)
		}
		eventually(t, time.Minute, "the drift in B to be healed", func() (bool, string) {
			cm, _ := inB("settings")
			return cm.Data["color"] == "blue", cm.Data["color"]
		})
		t.Logf("the drift in B was healed %s after it was made (measured by polling every 100 ms)", time.Since(drifted).Round(10*time.Millisecond))
	})

	t.Run("an object removed from Git is pruned in B", func(t *testing.T) {
		second := commit(t, w, map[string]string{"deploy/extra.yaml": ""})
		requestSync(t, ns, "into-b")
		readyAt(t, ns, "into-b", second)
		if _, ok := inB("extra"); ok {
			t.Error("extra is still in B after it left Git")
		}
		if _, ok := inB("settings"); !ok {
			t.Error("settings left B")
		}
	})

	t.Run("B unreachable fails into-b alone, and it recovers", func(t *testing.T) {
		if err := b.StopAPIServer(); err != nil {
			t.Fatal(err)
		}
		// A tick within 10 s of the last answer goes by it (and an
		// unchanged tick asks B nothing): ask again until one finds B gone.
		var app *plumbv1.App
		asked := time.Time{}
		eventually(t, 2*time.Minute, "into-b to report B unreachable", func() (bool, string) {
			if time.Since(asked) > 3*time.Second {
				requestSync(t, ns, "into-b")
				asked = time.Now()
			}
			app = getApp(t, ns, "into-b")
			c := findCondition(app, plumbv1.ConditionReady)
			return c.Status == metav1.ConditionFalse && c.Reason == plumbv1.ReasonClusterUnreachable, c.Reason + ": " + c.Message
		})
		if c := findCondition(app, plumbv1.ConditionReady); !strings.Contains(c.Message, "cluster-b") {
			t.Errorf("Ready's message %q does not name the destination", c.Message)
		}
		// An App that depends on into-b waits, and says where into-b deploys.
		if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns + "-after"}}); err != nil {
			t.Fatal(err)
		}
		createApp(t, ns, "after-b", url, func(a *plumbv1.App) {
			a.Labels = map[string]string{"e2e-shard": "remote"}
			a.Spec.TargetNamespace = ns + "-after"
			a.Spec.DependsOn = []plumbv1.AppReference{{Name: "into-b"}}
		})
		waiting := notReady(t, ns, "after-b", plumbv1.ReasonDependencyNotReady)
		if c := findCondition(waiting, plumbv1.ConditionReady); !strings.Contains(c.Message, "(into the cluster of Secret cluster-b)") ||
			!strings.Contains(c.Message, plumbv1.ReasonClusterUnreachable) {
			t.Errorf("after-b's Ready message %q, want into-b's destination and ClusterUnreachable", c.Message)
		}
		third := commit(t, w, map[string]string{"deploy/settings.yaml": configMapYAML("settings", "green")})
		requestSync(t, ns, "into-a")
		readyAt(t, ns, "into-a", third)
		if err := b.StartAPIServer(); err != nil {
			t.Fatal(err)
		}
		eventually(t, 3*time.Minute, "into-b to recover once B is back", func() (bool, string) {
			app := getApp(t, ns, "into-b")
			c := findCondition(app, plumbv1.ConditionReady)
			return c.Status == metav1.ConditionTrue && strings.HasSuffix(app.Status.LastAppliedRevision, third), c.Reason + ": " + c.Message
		})
		if cm, _ := inB("settings"); cm.Data["color"] != "green" {
			t.Errorf("settings in B after the recovery: %v, want green", cm.Data)
		}
		readyAt(t, ns, "after-b", third)
	})

	t.Run("a token rotated in the Secret is used", func(t *testing.T) {
		fresh := b.kubeconfig(t, "plumb-second")
		current := &corev1.Secret{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(secret), current); err != nil {
			t.Fatal(err)
		}
		current.Data["value"] = fresh
		if err := k8s.Update(ctx, current); err != nil {
			t.Fatal(err)
		}
		// The old token loses its rights at once (its binding) and is
		// revoked with its ServiceAccount: only the new one can heal the
		// drift below.
		if err := b.k8s.Delete(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "plumb-first"}}); err != nil {
			t.Fatal(err)
		}
		if err := b.k8s.Delete(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "plumb-first"}}); err != nil {
			t.Fatal(err)
		}
		cm, _ := inB("settings")
		if err := b.k8s.Patch(ctx, cm, client.RawPatch(types.MergePatchType, []byte(`{"data":{"color":"drifted-again"}}`)), client.FieldOwner("kubectl-patch")); err != nil {
			t.Fatal(err)
		}
		eventually(t, 2*time.Minute, "the drift to be healed with the rotated token", func() (bool, string) {
			cm, _ := inB("settings")
			return cm.Data["color"] == "green", cm.Data["color"]
		})
	})

	t.Run("the App's ServiceAccount is impersonated in B", func(t *testing.T) {
		// The revision into-b applied (settings green).
		applied := getApp(t, ns, "into-b").Status.LastAppliedRevision
		head := applied[strings.LastIndex(applied, ":")+1:]
		for _, name := range []string{ns + "-sa", ns + "-none"} {
			if err := b.k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
				t.Fatal(err)
			}
		}
		for _, name := range []string{"deployer", "nobody"} {
			if err := b.k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
				t.Fatal(err)
			}
		}
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns + "-sa", Name: "deployer"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}}}
		binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns + "-sa", Name: "deployer"},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "deployer"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: "deployer"}}}
		for _, obj := range []client.Object{role, binding} {
			if err := b.k8s.Create(ctx, obj); err != nil {
				t.Fatal(err)
			}
		}
		as := func(name, sa, target string) {
			createApp(t, ns, name, url, func(a *plumbv1.App) {
				remote(a)
				a.Spec.ServiceAccountName = sa
				a.Spec.TargetNamespace = target
			})
		}
		as("as-deployer", "deployer", ns+"-sa")
		as("as-nobody", "nobody", ns+"-none")
		as("as-ghost", "ghost", ns+"-none")
		readyAt(t, ns, "as-deployer", head)
		if cm := (&corev1.ConfigMap{}); b.k8s.Get(ctx, types.NamespacedName{Namespace: ns + "-sa", Name: "settings"}, cm) != nil || cm.Data["color"] != "green" {
			t.Errorf("settings in B's %s-sa: %v, want applied as deployer", ns, cm.Data)
		}
		for name, want := range map[string]string{"as-nobody": "system:serviceaccount:" + ns + ":nobody", "as-ghost": "ServiceAccount not found"} {
			app := notReady(t, ns, name, plumbv1.ReasonApplyFailed)
			if c := findCondition(app, plumbv1.ConditionReady); !strings.Contains(c.Message, want) {
				t.Errorf("%s's Ready message %q, want %q", name, c.Message, want)
			}
		}
		if err := b.k8s.Get(ctx, types.NamespacedName{Namespace: ns + "-none", Name: "settings"}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
			t.Errorf("settings in B's %s-none: %v, want none (its ServiceAccounts may not write there)", ns, err)
		}
	})

	t.Run("deleting the App prunes its objects in B", func(t *testing.T) {
		if err := k8s.Delete(ctx, &plumbv1.App{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "into-b"}}); err != nil {
			t.Fatal(err)
		}
		eventually(t, time.Minute, "into-b's objects to leave B and the App to be gone", func() (bool, string) {
			_, present := inB("settings")
			err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "into-b"}, &plumbv1.App{})
			return !present && apierrors.IsNotFound(err), fmt.Sprintf("settings in B: %v; App: %v", present, err)
		})
	})

	t.Run("a destination at a blocked address is never dialled", func(t *testing.T) {
		// The cloud metadata address, with B's credentials: refused at the
		// dial (no packet leaves), named as blocked in Ready.
		metadata := strings.Replace(string(b.kubeconfig(t, "plumb-metadata")), b.Config.Host, "https://169.254.169.254", 1)
		if !strings.Contains(metadata, "169.254.169.254") {
			t.Fatalf("the kubeconfig does not hold B's server %s to replace", b.Config.Host)
		}
		if err := k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "metadata"},
			Data: map[string][]byte{"value": []byte(metadata)}}); err != nil {
			t.Fatal(err)
		}
		createApp(t, ns, "into-metadata", url, func(a *plumbv1.App) {
			a.Labels = map[string]string{"e2e-shard": "remote"}
			a.Spec.Destination = &plumbv1.Destination{KubeConfig: plumbv1.KubeConfigReference{SecretRef: plumbv1.SecretKeyReference{Name: "metadata"}}}
		})
		app := notReady(t, ns, "into-metadata", plumbv1.ReasonClusterUnreachable)
		if c := findCondition(app, plumbv1.ConditionReady); !strings.Contains(c.Message, "--destination-blocked-cidrs") {
			t.Errorf("into-metadata's Ready message %q, want the blocked range named", c.Message)
		}
	})

	t.Run("an App cannot name a Secret of another namespace", func(t *testing.T) {
		other := newNamespace(t)
		stolen := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "cluster-b"},
			Data: map[string][]byte{"value": b.kubeconfig(t, "plumb-other")}}
		if err := k8s.Create(ctx, stolen); err != nil {
			t.Fatal(err)
		}
		// secretRef has no namespace: the API server refuses one (strict
		// field validation) or drops it, and the App reads its own
		// namespace's Secret, which does not exist here.
		raw := fmt.Sprintf(`{"apiVersion":"plumb.dev/v1alpha1","kind":"App","metadata":{"name":"thief","namespace":%q,"labels":{"e2e-shard":"remote"}},
"spec":{"source":{"url":%q,"ref":{"branch":"main"},"path":"deploy"},"destination":{"kubeConfig":{"secretRef":{"name":"cluster-b","namespace":%q}}}}}`, ns+"-thief", url, other)
		// The namespace exists in A and in B, so that an apply with the
		// stolen Secret would land in B.
		for _, c := range []client.Client{k8s, b.k8s} {
			if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns + "-thief"}}); err != nil {
				t.Fatal(err)
			}
		}
		app := &plumbv1.App{ObjectMeta: metav1.ObjectMeta{Namespace: ns + "-thief", Name: "thief"}}
		err := k8s.Patch(ctx, app, client.RawPatch(types.ApplyPatchType, []byte(raw)), client.FieldOwner("thief"), client.ForceOwnership,
			&client.PatchOptions{Raw: &metav1.PatchOptions{FieldValidation: "Strict"}})
		if err == nil || !strings.Contains(err.Error(), "namespace") {
			t.Fatalf("an App whose secretRef names a namespace was taken (strict validation): %v", err)
		}
		// Created without strict validation (kubectl create --validate=false):
		// the unknown field is dropped.
		loose := &unstructured.Unstructured{}
		if err := loose.UnmarshalJSON([]byte(raw)); err != nil {
			t.Fatal(err)
		}
		if err := k8s.Create(ctx, loose, &client.CreateOptions{Raw: &metav1.CreateOptions{FieldValidation: "Ignore"}}); err != nil {
			t.Fatalf("creating the App without strict validation: %v", err)
		}
		if _, found, _ := unstructured.NestedString(getAppUnstructured(t, ns+"-thief", "thief"), "spec", "destination", "kubeConfig", "secretRef", "namespace"); found {
			t.Fatal("the API server kept secretRef.namespace")
		}
		notReady(t, ns+"-thief", "thief", plumbv1.ReasonObserveFailed)
		got := getApp(t, ns+"-thief", "thief")
		if c := findCondition(got, plumbv1.ConditionReady); !strings.Contains(c.Message, ns+"-thief/cluster-b") || !strings.Contains(c.Message, "not found") {
			t.Errorf("Ready's message %q, want the Secret of the App's own namespace not found", c.Message)
		}
		if _, ok := getConfigMap(t, ns+"-thief", "settings"); ok {
			t.Error("the thief applied settings in cluster A")
		}
		// The stolen Secret names B: nothing of the thief's may land there.
		if err := b.k8s.Get(ctx, types.NamespacedName{Namespace: ns + "-thief", Name: "settings"}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
			t.Errorf("settings in B's %s-thief: %v, want none (the thief used the other namespace's Secret)", ns, err)
		}
	})
}

// getAppUnstructured reads an App as the API server stores it.
func getAppUnstructured(t *testing.T, ns, name string) map[string]any {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(plumbv1.GroupVersion.WithKind("App"))
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
		t.Fatal(err)
	}
	return u.Object
}
