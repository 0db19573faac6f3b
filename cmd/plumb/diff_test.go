package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/preview/diffreport"
	"github.com/plumb-dev/plumb/internal/testenv"
)

func configMap(ns, name string, data map[string]string) string {
	var lines []string
	for k, v := range data {
		lines = append(lines, "  "+k+": "+strconv.Quote(v))
	}
	slices.Sort(lines)
	return "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: " + name + ", namespace: " + ns + "}\ndata:\n" + strings.Join(lines, "\n") + "\n"
}

func secret(ns, name, password string) string {
	return "apiVersion: v1\nkind: Secret\nmetadata: {name: " + name + ", namespace: " + ns + "}\nstringData:\n  password: " + password + "\n"
}

func service(ns, name string, port int) string {
	return "apiVersion: v1\nkind: Service\nmetadata: {name: " + name + ", namespace: " + ns + "}\nspec: {ports: [{port: " +
		strconv.Itoa(port) + "}], selector: {app: " + name + "}}\n"
}

// diffJSON runs plumb diff -o json and decodes it.
func (w *world) diffJSON(app string, extra ...string) (*diffreport.JSONReport, run) {
	w.t.Helper()
	r := w.plumb(append([]string{"diff", app, "-n", w.ns, "-o", "json"}, extra...)...)
	if r.code == 2 {
		w.t.Fatalf("plumb diff failed:\n%s", r)
	}
	report := &diffreport.JSONReport{}
	if err := json.Unmarshal([]byte(r.stdout), report); err != nil {
		w.t.Fatalf("plumb diff -o json printed no report: %v\n%s", err, r)
	}
	return report, r
}

// changed is each object of a report with its action and fields.
func changed(r *diffreport.JSONReport) map[string]string {
	out := map[string]string{}
	for _, o := range r.Objects {
		out[o.Kind+"/"+o.Name] = o.Action + " " + strings.Join(o.Fields, ",")
	}
	return out
}

func TestDiffShowsWhatTheNextTickWouldChange(t *testing.T) {
	w := newWorld(t, "cli-diff")
	ns := w.ns
	first := w.push("first", map[string]string{
		"web/configmap.yaml": configMap(ns, "web", map[string]string{"greeting": "hello", "ignored": "from-git"}),
		"web/secret.yaml":    secret(ns, "web-credentials", "s3cret-one"),
		"web/service.yaml":   service(ns, "web", 80),
	})
	w.createApp("web", "web", func(app *plumbv1.App) {
		app.Spec.Ignore = []plumbv1.IgnoreRule{{Kind: "ConfigMap", Name: "web", Paths: []string{"/data/ignored"}}}
	})
	w.waitReady("web", first)

	t.Run("a converged App: exit 0 and only the summary", func(t *testing.T) {
		r := w.plumb("diff", "web", "-n", ns)
		want := "No differences: 3 objects match main@sha1:" + first + "\n"
		if r.code != 0 || r.stdout != want {
			t.Errorf("plumb diff on a converged App:\n%s\nwant exit 0 and exactly %q", r, want)
		}
	})

	t.Run("a new commit: exit 1 and exactly the changed fields; an ignored field is no change", func(t *testing.T) {
		second := w.push("second", map[string]string{
			"web/configmap.yaml": configMap(ns, "web", map[string]string{"greeting": "bonjour", "ignored": "changed-in-git"}),
		})
		report, r := w.diffJSON("web")
		if r.code != 1 {
			t.Errorf("exit %d, want 1\n%s", r.code, r)
		}
		if diff := cmp.Diff(map[string]string{"ConfigMap/web": "update .data.greeting"}, changed(report)); diff != "" {
			t.Errorf("changed objects (-want +got):\n%s", diff)
		}
		if report.Revision != "main@sha1:"+second {
			t.Errorf("revision %q, want main@sha1:%s", report.Revision, second)
		}
		text := w.plumb("diff", "web", "-n", ns)
		for _, want := range []string{"~ ConfigMap/" + ns + "/web (updated)", "-  greeting: hello", "+  greeting: bonjour",
			"Summary: 1 to update; 2 unchanged (main@sha1:" + second + ")"} {
			if !strings.Contains(text.stdout, want) {
				t.Errorf("the text diff lacks %q:\n%s", want, text)
			}
		}
		if strings.Contains(text.stdout, "\x1b[") {
			t.Errorf("colours written to a pipe:\n%q", text.stdout)
		}
		if strings.Contains(text.stdout, "changed-in-git") {
			t.Errorf("the ignored field is shown:\n%s", text)
		}
		w.tick("web", second)
	})

	t.Run("a Secret changed in Git: its values are masked", func(t *testing.T) {
		third := w.push("third", map[string]string{"web/secret.yaml": secret(ns, "web-credentials", "s3cret-two")})
		report, r := w.diffJSON("web")
		if diff := cmp.Diff(map[string]string{"Secret/web-credentials": "update .data.password"}, changed(report)); diff != "" {
			t.Errorf("changed objects (-want +got):\n%s", diff)
		}
		text := w.plumb("diff", "web", "-n", ns)
		for _, out := range []string{r.stdout, text.stdout, text.stderr, r.stderr} {
			for _, value := range []string{"s3cret-one", "s3cret-two"} {
				for _, form := range []string{value, base64.StdEncoding.EncodeToString([]byte(value))} {
					if strings.Contains(out, form) {
						t.Errorf("the diff shows a Secret value (%q):\n%s", form, out)
					}
				}
			}
		}
		if !strings.Contains(text.stdout, "-  password: '*** (before)'") || !strings.Contains(text.stdout, "+  password: '*** (after)'") {
			t.Errorf("the masked change is not shown:\n%s", text)
		}
		w.tick("web", third)
	})

	t.Run("a drifted object: marked with the manager who changed it", func(t *testing.T) {
		alerted := w.push("alerted", map[string]string{"alerted/configmap.yaml": configMap(ns, "alerted", map[string]string{"mode": "calm"})})
		w.createApp("alerted", "alerted", func(app *plumbv1.App) { app.Spec.DriftPolicy = plumbv1.DriftPolicyAlert })
		w.waitReady("alerted", alerted)
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"})
		live.SetNamespace(ns)
		live.SetName("alerted")
		patch := client.RawPatch(types.MergePatchType, []byte(`{"data":{"mode":"panic"}}`))
		if err := w.k8s.Patch(context.Background(), live, patch, client.FieldOwner("kubectl-edit")); err != nil {
			t.Fatal(err)
		}
		report, r := w.diffJSON("alerted")
		if r.code != 1 || len(report.Objects) != 1 || report.Objects[0].Action != "drift" || !report.Objects[0].Left {
			t.Fatalf("want one drifted object left in place:\n%s", r)
		}
		drift := report.Objects[0].Drift
		if len(drift) != 1 || drift[0].Path != ".data.mode" || drift[0].Manager != "kubectl-edit" || drift[0].Before != "calm" || drift[0].After != "panic" {
			t.Errorf("the drift: %+v, want .data.mode calm → panic by kubectl-edit", drift)
		}
		text := w.plumb("diff", "alerted", "-n", ns)
		for _, want := range []string{"! ConfigMap/" + ns + "/alerted (drifted by kubectl-edit; left so (driftPolicy alert))",
			".data.mode: calm → panic, by kubectl-edit (Update)"} {
			if !strings.Contains(text.stdout, want) {
				t.Errorf("the text diff lacks %q:\n%s", want, text)
			}
		}
		// The controller reports the same fields and manager.
		app := w.waitFor("alerted", "drift reported", func(app *plumbv1.App) bool { return app.Status.Drift != nil && app.Status.Drift.Count == 1 })
		if got := app.Status.Drift.Objects[0]; !slices.Equal(got.Fields, []string{".data.mode"}) || !slices.Equal(got.Managers, []string{"kubectl-edit"}) {
			t.Errorf("the controller's drift: %+v, want the CLI's fields and manager", got)
		}
	})

	t.Run("fields the controller left to a manager that fights it are left by the diff too", func(t *testing.T) {
		fought := w.push("fought", map[string]string{"fought/configmap.yaml": configMap(ns, "fought", map[string]string{"mode": "calm", "other": "x"})})
		w.createApp("fought", "fought", nil)
		w.waitReady("fought", fought)
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"})
		live.SetNamespace(ns)
		live.SetName("fought")
		conflict := func(app *plumbv1.App) bool {
			c := apimeta.FindStatusCondition(app.Status.Conditions, plumbv1.ConditionDrifted)
			return c != nil && c.Reason == "DriftConflict"
		}
		// Another controller sets the field again after each heal, until
		// plumb leaves it to it.
		for round := 0; !conflict(w.app("fought")); round++ {
			if round == 8 {
				t.Fatal("plumb never left the field to the manager that keeps changing it")
			}
			value := "fight-" + strconv.Itoa(round)
			patch := client.RawPatch(types.MergePatchType, []byte(`{"data":{"mode":"`+value+`"}}`))
			if err := w.k8s.Patch(context.Background(), live, patch, client.FieldOwner("fighter")); err != nil {
				t.Fatal(err)
			}
			w.waitFor("fought", "the round "+value+" handled", func(app *plumbv1.App) bool {
				cm := &corev1.ConfigMap{}
				if err := w.k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "fought"}, cm); err != nil {
					return false
				}
				return cm.Data["mode"] == "calm" || conflict(app)
			})
		}
		app := w.waitFor("fought", "the conflict in the status", func(app *plumbv1.App) bool {
			return app.Status.Drift != nil && len(app.Status.Drift.Objects) == 1 && len(app.Status.Drift.Objects[0].LeftTo) == 1
		})
		left := app.Status.Drift.Objects[0].LeftTo[0]
		if left.Path != ".data.mode" || left.Manager != "fighter" {
			t.Errorf("the controller left %+v, want .data.mode to fighter", left)
		}
		report, r := w.diffJSON("fought")
		if r.code != 1 || len(report.Objects) != 1 || report.Objects[0].Action != "drift" || !report.Objects[0].Left ||
			len(report.Objects[0].LeftTo) != 1 || report.Objects[0].LeftTo[0].Path != left.Path || report.Objects[0].LeftTo[0].Manager != left.Manager ||
			len(report.Objects[0].Drift) != 0 {
			t.Errorf("want the field left to fighter, as the controller leaves it, and no drift to put back:\n%s", r)
		}
		text := w.plumb("diff", "fought", "-n", ns)
		if !strings.Contains(text.stdout, "! ConfigMap/"+ns+"/fought (drifted by fighter; left to it (DriftConflict))") ||
			!strings.Contains(text.stdout, ".data.mode: left to fighter, which keeps changing it back (DriftConflict)") {
			t.Errorf("the text diff:\n%s", text)
		}
	})

	t.Run("--path: a local working copy shows the local change", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "configmap.yaml"), []byte(configMap(ns, "web", map[string]string{"greeting": "hola"})), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "service.yaml"), []byte(service(ns, "web", 80)), 0o644); err != nil {
			t.Fatal(err)
		}
		report, r := w.diffJSON("web", "--path", dir)
		want := map[string]string{"ConfigMap/web": "update .data.greeting", "Secret/web-credentials": "prune ."}
		if diff := cmp.Diff(want, changed(report)); diff != "" {
			t.Errorf("changed objects (-want +got):\n%s\n%s", diff, r)
		}
		if report.Revision != "working-copy" {
			t.Errorf("revision %q, want working-copy", report.Revision)
		}
		// The pruned Secret is shown, its values masked.
		for _, value := range []string{"s3cret-two", base64.StdEncoding.EncodeToString([]byte("s3cret-two"))} {
			if strings.Contains(r.stdout, value) {
				t.Errorf("the pruned Secret's value is shown:\n%s", r)
			}
		}
	})

	t.Run("a user who may read but not patch: exit 2 naming the right the dry-run needs", func(t *testing.T) {
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "reader"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{plumbv1.GroupVersion.Group}, Resources: []string{"apps"}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"secrets", "configmaps", "services", "serviceaccounts"}, Verbs: []string{"get"}},
		}}
		binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "reader"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "reader"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "reader"}}}
		for _, obj := range []client.Object{role, binding} {
			if err := w.k8s.Create(context.Background(), obj); err != nil {
				t.Fatal(err)
			}
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "configmap.yaml"), []byte(configMap(ns, "web", map[string]string{"greeting": "hej"})), 0o644); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the reader's Role in force", func() bool {
			return !strings.Contains(w.plumb("diff", "web", "-n", ns, "--as", "reader", "--path", dir).stderr, `cannot get resource "apps"`)
		})
		r := w.plumb("diff", "web", "-n", ns, "--as", "reader", "--path", dir)
		if r.code != 2 || !strings.Contains(r.stderr, `cannot patch resource "configmaps"`) || strings.Contains(r.stdout+r.stderr, "the API server refuses it") {
			t.Errorf("want exit 2 naming the patch right, not a refusal of the object:\n%s", r)
		}
	})

	t.Run("an App that acts as a ServiceAccount is previewed as it", func(t *testing.T) {
		deployer := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "deployer"}}
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "deployer"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch", "create", "patch", "delete"}}}}
		binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "deployer"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "deployer"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "deployer"}}}
		for _, obj := range []client.Object{deployer, role, binding} {
			if err := w.k8s.Create(context.Background(), obj); err != nil {
				t.Fatal(err)
			}
		}
		w.push("tenant", map[string]string{
			"tenant/configmap.yaml": configMap(ns, "tenant", map[string]string{"a": "b"}),
			"tenant/service.yaml":   service(ns, "tenant", 80),
		})
		w.createApp("tenant", "tenant", func(app *plumbv1.App) { app.Spec.ServiceAccountName, app.Labels = "deployer", nil })
		serviceAccount := "system:serviceaccount:" + ns + ":deployer"
		// RBAC takes a moment to see a new binding: until then the
		// ServiceAccount may not even patch ConfigMaps.
		var r run
		eventually(t, "the ServiceAccount's Role in force", func() bool {
			r = w.plumb("diff", "tenant", "-n", ns)
			return !strings.Contains(r.stderr, `cannot patch resource "configmaps"`)
		})
		if r.code != 2 || !strings.Contains(r.stderr, `User "`+serviceAccount+`" cannot patch resource "services"`) {
			t.Errorf("want exit 2 naming what the ServiceAccount may not do:\n%s", r)
		}
		mine, r := w.diffJSON("tenant", "--with-my-rights")
		if diff := cmp.Diff(map[string]string{"ConfigMap/tenant": "create .", "Service/tenant": "create ."}, changed(mine)); r.code != 1 || diff != "" {
			t.Errorf("--with-my-rights (-want +got):\n%s\n%s", diff, r)
		}
		// A user who may read everything but not impersonate.
		viewerRole := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "viewer"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "reader"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "viewer"}}}
		if err := w.k8s.Create(context.Background(), viewerRole); err != nil {
			t.Fatal(err)
		}
		viewer := w.kubeconfigOf("viewer")
		eventually(t, "the viewer's Role in force", func() bool {
			return !strings.Contains(w.plumbWith(viewer, "diff", "tenant", "-n", ns).stderr, `cannot get resource "apps"`)
		})
		refused := w.plumbWith(viewer, "diff", "tenant", "-n", ns)
		if refused.code != 2 || !strings.Contains(refused.stderr, "cannot impersonate") || !strings.Contains(refused.stderr, "plumb diff --with-my-rights") {
			t.Errorf("a user who may not impersonate the ServiceAccount: want exit 2 and the way out:\n%s", refused)
		}
		// As a controller run with --default-service-account would tick.
		w.createApp("tenant-default", "tenant", func(app *plumbv1.App) { app.Labels = nil })
		if r := w.plumb("diff", "tenant-default", "-n", ns); r.code != 1 {
			t.Errorf("an App naming no ServiceAccount, with your rights: want exit 1\n%s", r)
		}
		if r := w.plumb("diff", "tenant-default", "-n", ns, "--default-service-account", "deployer"); r.code != 2 ||
			!strings.Contains(r.stderr, `User "`+serviceAccount+`" cannot patch resource "services"`) {
			t.Errorf("--default-service-account deployer: want exit 2 naming what deployer may not do:\n%s", r)
		}
		twice := w.plumb("diff", "tenant", "-n", ns, "--as", "reader")
		if twice.code != 2 || !strings.Contains(twice.stderr, "you act as reader already") {
			t.Errorf("--as on an App that acts as a ServiceAccount: want exit 2, impersonation happens once:\n%s", twice)
		}
	})

	t.Run("a new Namespace and objects in it: shown as rendered, not dry-run", func(t *testing.T) {
		fresh := ns + "-new"
		w.push("fresh", map[string]string{
			"fresh/namespace.yaml": "apiVersion: v1\nkind: Namespace\nmetadata: {name: " + fresh + "}\n",
			"fresh/configmap.yaml": configMap(fresh, "inside", map[string]string{"a": "b"}),
		})
		w.createApp("fresh", "fresh", func(app *plumbv1.App) { app.Labels = nil })
		report, r := w.diffJSON("fresh")
		if diff := cmp.Diff(map[string]string{"Namespace/" + fresh: "create .", "ConfigMap/inside": "create ."}, changed(report)); r.code != 1 || diff != "" {
			t.Errorf("a new Namespace with an object in it (-want +got):\n%s\n%s", diff, r)
		}
		// As a controller run with --no-cross-namespace would tick.
		if r := w.plumb("diff", "fresh", "-n", ns, "--no-cross-namespace"); r.code != 2 || !strings.Contains(r.stderr, "breaks --no-cross-namespace") {
			t.Errorf("--no-cross-namespace: want exit 2 and the policy's refusal:\n%s", r)
		}
	})

	t.Run("an App waiting for its dependsOn: the diff says nothing is applied yet", func(t *testing.T) {
		w.createApp("waits", "tenant", func(app *plumbv1.App) {
			app.Labels, app.Spec.TargetNamespace = nil, ""
			app.Spec.DependsOn = []plumbv1.AppReference{{Name: "not-there"}}
		})
		r := w.plumb("diff", "waits", "-n", ns)
		if r.code != 1 || !strings.Contains(r.stdout, "; nothing is applied yet: DependencyNotReady: ") || !strings.Contains(r.stdout, "not-there") {
			t.Errorf("want the wait said beside the diff:\n%s", r)
		}
	})

	t.Run("an unreachable repository: exit 2 naming the phase", func(t *testing.T) {
		w.createApp("unreachable", "web", func(app *plumbv1.App) {
			app.Spec.Source.URL = "http://" + testenv.FreeAddrsForTest(t, 1)[0] + "/nothing.git"
			app.Labels = nil // the controller leaves it alone
		})
		r := w.plumb("diff", "unreachable", "-n", ns)
		if r.code != 2 || !strings.Contains(r.stderr, "Error: read phase failed (ReadFailed, SourceUnavailable)") || strings.Contains(r.stderr, "goroutine") {
			t.Errorf("want exit 2 and the Read phase's failure:\n%s", r)
		}
	})

	t.Run("a file:// source is refused: it would be read from this machine's disk", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "local-secret.yaml"), []byte(configMap(ns, "from-my-disk", map[string]string{"key": "mine"})), 0o644); err != nil {
			t.Fatal(err)
		}
		w.createApp("from-disk", ".", func(app *plumbv1.App) {
			app.Spec.Source.URL, app.Spec.Source.SecretRef, app.Labels = "file://"+dir, nil, nil
		})
		r := w.plumb("diff", "from-disk", "-n", ns)
		if r.code != 2 || !strings.Contains(r.stderr, "file:// sources are refused") || strings.Contains(r.stdout+r.stderr, "from-my-disk") {
			t.Errorf("want exit 2 and the refusal, and nothing of the folder read:\n%s", r)
		}
	})

	t.Run("a user RBAC does not let read the App: exit 2 saying what to ask for", func(t *testing.T) {
		r := w.plumb("diff", "web", "-n", ns, "--as", "someone-without-rights")
		if r.code != 2 || !strings.Contains(r.stderr, "Error: not allowed: ") || !strings.Contains(r.stderr, `User "someone-without-rights" cannot get resource "apps"`) ||
			!strings.Contains(r.stderr, "(ask for RBAC on apps.plumb.dev in namespace "+ns+")") {
			t.Errorf("want exit 2 and the refusal:\n%s", r)
		}
	})

	t.Run("a usage error is an error (2), not a difference (1)", func(t *testing.T) {
		for _, args := range [][]string{{"diff"}, {"diff", "web", "--no-such-flag"}} {
			if r := w.plumb(args...); r.code != 2 {
				t.Errorf("plumb %v: want exit 2\n%s", args, r)
			}
		}
	})

	t.Run("an App that does not exist: exit 2 saying how to list them", func(t *testing.T) {
		r := w.plumb("diff", "nope", "-n", ns)
		if r.code != 2 || !strings.Contains(r.stderr, "App nope not found in namespace "+ns+" (list them with: plumb get apps") {
			t.Errorf("want exit 2 and what to do next:\n%s", r)
		}
	})
}

// TestDiffEqualsWhatTheControllerDoes checks, on a series of commits, that
// what plumb diff says the next tick would change is what the controller's
// tick then changes: the same objects, the same actions, the same fields
// (the live objects compared before and after the tick).
func TestDiffEqualsWhatTheControllerDoes(t *testing.T) {
	w := newWorld(t, "cli-equal")
	ns := w.ns
	commit := w.push("base", map[string]string{
		"app/a.yaml":       configMap(ns, "a", map[string]string{"k": "v1", "ignored": "one"}),
		"app/b.yaml":       configMap(ns, "b", map[string]string{"x": "1"}),
		"app/service.yaml": service(ns, "s", 80),
		"app/secret.yaml":  secret(ns, "sec", "p1"),
	})
	w.createApp("series", "app", func(app *plumbv1.App) {
		app.Spec.Ignore = []plumbv1.IgnoreRule{{Kind: "ConfigMap", Name: "a", Paths: []string{"/data/ignored"}}}
	})
	w.waitReady("series", commit)

	for _, step := range []struct {
		name  string
		files map[string]string
	}{
		{"changed values, a new object, a changed Secret", map[string]string{
			"app/a.yaml":       configMap(ns, "a", map[string]string{"k": "v2", "ignored": "one"}),
			"app/c.yaml":       configMap(ns, "c", map[string]string{"new": "yes"}),
			"app/service.yaml": service(ns, "s", 81),
			"app/secret.yaml":  secret(ns, "sec", "p2"),
		}},
		{"an object left Git, a label added, an ignored field changed", map[string]string{
			"app/b.yaml": "",
			"app/a.yaml": strings.Replace(configMap(ns, "a", map[string]string{"k": "v2", "ignored": "two"}),
				"metadata: {name: a, namespace: "+ns+"}", "metadata: {name: a, namespace: "+ns+", labels: {tier: front}}", 1),
		}},
		{"a commit that changes no object", map[string]string{"README.md": "nothing to apply\n"}},
	} {
		t.Run(step.name, func(t *testing.T) {
			commit = w.push(step.name, step.files)
			report, r := w.diffJSON("series")
			predicted := changed(report)
			if wantCode := map[bool]int{true: 1, false: 0}[len(predicted) > 0]; r.code != wantCode {
				t.Errorf("exit %d, want %d\n%s", r.code, wantCode, r)
			}
			ids := map[string]plumbv1.ObjectRef{}
			for _, o := range report.Objects {
				ids[o.Kind+"/"+o.Name] = o.ObjectRef
			}
			inventory := func() {
				for _, e := range w.app("series").Status.Inventory.Entries {
					ids[e.Kind+"/"+e.Name] = e.ObjectRef
				}
			}
			inventory()
			before := w.snapshot(ids)
			w.tick("series", commit)
			inventory()
			after := w.snapshot(ids)
			done := map[string]string{}
			for id := range ids {
				fields := diffreport.Fields(before[id], after[id])
				switch {
				case len(fields) == 0:
				case before[id] == nil:
					done[id] = "create " + strings.Join(fields, ",")
				case after[id] == nil:
					done[id] = "prune " + strings.Join(fields, ",")
				default:
					done[id] = "update " + strings.Join(fields, ",")
				}
			}
			if diff := cmp.Diff(done, predicted); diff != "" {
				t.Errorf("plumb diff (+) against what the tick changed (-):\n%s", diff)
			}
			if len(done) == 0 && step.name != "a commit that changes no object" {
				t.Error("the step changed nothing: it tests nothing")
			}
		})
	}
}

// snapshot reads each object (nil when it does not exist).
func (w *world) snapshot(ids map[string]plumbv1.ObjectRef) map[string]*unstructured.Unstructured {
	w.t.Helper()
	out := map[string]*unstructured.Unstructured{}
	for id, ref := range ids {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(schema.GroupVersionKind{Group: ref.Group, Version: ref.Version, Kind: ref.Kind})
		err := w.k8s.Get(context.Background(), types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, u)
		switch {
		case apierrors.IsNotFound(err):
			out[id] = nil
		case err != nil:
			w.t.Fatal(err)
		default:
			out[id] = u
		}
	}
	return out
}
