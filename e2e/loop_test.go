package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/source/git/gittest"
	"github.com/plumb-dev/plumb/internal/testenv"
)

func configMapYAML(name, color string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\ndata:\n  color: %s\n", name, color)
}

// repoCount numbers the repositories, so one test may make several.
var repoCount int

// gitRepo pushes files to a new repository named after the test.
func gitRepo(t *testing.T, files map[string]string) (*gittest.Workdir, string, string) {
	t.Helper()
	repoCount++
	name := fmt.Sprintf("%s-%d.git", strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())), repoCount)
	return gitRepoNamed(t, name, files)
}

// gitRepoNamed pushes files to a new repository at path name (e.g.
// owner/repo.git).
func gitRepoNamed(t *testing.T, name string, files map[string]string) (*gittest.Workdir, string, string) {
	t.Helper()
	w, err := gitServer.NewWorkdir(name)
	if err != nil {
		t.Fatal(err)
	}
	hash := commit(t, w, files)
	return w, gitServer.HTTPURL(name), hash
}

// commit commits files (an empty content deletes a file) and pushes main.
func commit(t *testing.T, w *gittest.Workdir, files map[string]string) string {
	t.Helper()
	hash, err := w.Commit("change", files)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Push("main"); err != nil {
		t.Fatal(err)
	}
	return hash
}

// createApp creates the credentials Secret and an App tracking main/deploy.
func createApp(t *testing.T, ns, name, url string, mutate func(*plumbv1.App)) *plumbv1.App {
	t.Helper()
	ctx := context.Background()
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-git"},
		StringData: map[string]string{"username": gittest.Username, "password": gittest.Password},
	}
	if err := k8s.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	app := &plumbv1.App{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: plumbv1.AppSpec{
			Source: plumbv1.Source{
				URL: url, Ref: plumbv1.GitRef{Branch: "main"}, Path: "deploy",
				SecretRef: &plumbv1.LocalObjectReference{Name: secret.Name},
			},
			Interval: &metav1.Duration{Duration: 10 * time.Minute},
		},
	}
	if mutate != nil {
		mutate(app)
	}
	if err := k8s.Create(ctx, app); err != nil {
		t.Fatalf("creating App: %v", err)
	}
	return app
}

// requestSync asks for a tick now, as `plumb sync` does.
func requestSync(t *testing.T, ns, name string) {
	t.Helper()
	app := getApp(t, ns, name)
	patch := client.MergeFrom(app.DeepCopy())
	if app.Annotations == nil {
		app.Annotations = map[string]string{}
	}
	app.Annotations[plumbv1.AnnotationSyncRequestedAt] = time.Now().Format(time.RFC3339Nano)
	if err := k8s.Patch(context.Background(), app, patch); err != nil {
		t.Fatal(err)
	}
}

func getConfigMap(t *testing.T, ns, name string) (*corev1.ConfigMap, bool) {
	t.Helper()
	cm := &corev1.ConfigMap{}
	err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, cm)
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return cm, true
}

func TestAnAppConvergesFollowsGitAndPrunes(t *testing.T) {
	setUp(t)
	ns := newNamespace(t)
	w, url, first := gitRepo(t, map[string]string{
		"deploy/config.yaml": configMapYAML("settings", "blue"),
		"deploy/extra.yaml":  configMapYAML("extra", "green"),
		"deploy/web.yaml":    testenv.Fixture(t, "web-deployment.yaml") + "---\n" + testenv.Fixture(t, "web-service.yaml"),
		"README.md":          "the shop",
	})
	createApp(t, ns, "shop", url, nil)
	app := readyAt(t, ns, "shop", first)

	t.Run("every object carries plumb's labels, revision and field manager", func(t *testing.T) {
		wantRevision := "main@sha1:" + first
		if app.Status.LastAttemptedRevision != wantRevision || app.Status.ObservedGeneration != app.Generation {
			t.Errorf("status: attempted %s observedGeneration %d (generation %d)", app.Status.LastAttemptedRevision, app.Status.ObservedGeneration, app.Generation)
		}
		if got := len(app.Status.Inventory.Entries); got != 4 {
			t.Errorf("inventory holds %d objects, want 4: %+v", got, app.Status.Inventory.Entries)
		}
		for _, o := range []struct {
			obj  client.Object
			name string
		}{{&corev1.ConfigMap{}, "settings"}, {&corev1.ConfigMap{}, "extra"}, {&appsv1.Deployment{}, "web"}, {&corev1.Service{}, "web"}} {
			obj, name := o.obj, o.name
			if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
				t.Fatalf("%T %s: %v", obj, name, err)
			}
			labels := obj.GetLabels()
			if labels["plumb.dev/app-name"] != "shop" || labels["plumb.dev/app-namespace"] != ns {
				t.Errorf("%T %s labels = %v", obj, name, labels)
			}
			if got := obj.GetAnnotations()["plumb.dev/revision"]; got != wantRevision {
				t.Errorf("%T %s revision annotation = %q, want %q", obj, name, got, wantRevision)
			}
			managers := []string{}
			for _, f := range obj.GetManagedFields() {
				managers = append(managers, f.Manager+"/"+string(f.Operation))
			}
			if !slices.Contains(managers, "plumb/Apply") {
				t.Errorf("%T %s managed by %v, want plumb/Apply", obj, name, managers)
			}
		}
	})

	t.Run("a new commit is applied, and only changed objects get its revision", func(t *testing.T) {
		second := commit(t, w, map[string]string{"deploy/config.yaml": configMapYAML("settings", "red")})
		requestSync(t, ns, "shop")
		readyAt(t, ns, "shop", second)
		cm, _ := getConfigMap(t, ns, "settings")
		if cm.Data["color"] != "red" || cm.Annotations["plumb.dev/revision"] != "main@sha1:"+second {
			t.Errorf("settings: color %q revision %q", cm.Data["color"], cm.Annotations["plumb.dev/revision"])
		}
		extra, _ := getConfigMap(t, ns, "extra")
		if got := extra.Annotations["plumb.dev/revision"]; got != "main@sha1:"+first {
			t.Errorf("the unchanged ConfigMap's revision moved to %q", got)
		}
	})

	t.Run("a removed file is pruned", func(t *testing.T) {
		third := commit(t, w, map[string]string{"deploy/extra.yaml": ""})
		requestSync(t, ns, "shop")
		readyAt(t, ns, "shop", third)
		eventually(t, 30*time.Second, "extra to be pruned", func() (bool, string) {
			_, exists := getConfigMap(t, ns, "extra")
			return !exists, "extra still exists"
		})
	})

	t.Run("an emptied folder prunes nothing and says why", func(t *testing.T) {
		commit(t, w, map[string]string{"deploy/config.yaml": "", "deploy/web.yaml": "", "deploy/README.md": "moved away"})
		requestSync(t, ns, "shop")
		app := notReady(t, ns, "shop", plumbv1.ReasonPruneFailed)
		cond := findCondition(app, plumbv1.ConditionReady)
		if !strings.Contains(cond.Message, "renders no objects") || !strings.Contains(cond.Message, "allowEmpty") {
			t.Errorf("Ready message %q does not explain the refusal", cond.Message)
		}
		if _, exists := getConfigMap(t, ns, "settings"); !exists {
			t.Errorf("settings was pruned after the folder was emptied")
		}
	})
}

func TestDriftIsHealedThroughTheInformerLongBeforeTheTimer(t *testing.T) {
	setUp(t)
	ns := newNamespace(t)
	_, url, first := gitRepo(t, map[string]string{"deploy/config.yaml": configMapYAML("settings", "blue")})
	createApp(t, ns, "drift", url, nil) // interval 10m
	readyAt(t, ns, "drift", first)

	cm, _ := getConfigMap(t, ns, "settings")
	cm.Data["color"] = "hacked"
	if err := k8s.Update(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the drift to be healed", func() (bool, string) {
		cm, _ := getConfigMap(t, ns, "settings")
		return cm.Data["color"] == "blue", "color is " + cm.Data["color"]
	})
}

func TestInvalidYAMLFailsTheReadAndKeepsTheLastGoodState(t *testing.T) {
	setUp(t)
	ns := newNamespace(t)
	w, url, first := gitRepo(t, map[string]string{"deploy/config.yaml": configMapYAML("settings", "blue")})
	createApp(t, ns, "broken", url, nil)
	readyAt(t, ns, "broken", first)

	commit(t, w, map[string]string{"deploy/config.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n data: [oops\n"})
	requestSync(t, ns, "broken")
	app := notReady(t, ns, "broken", plumbv1.ReasonReadFailed)
	if msg := findCondition(app, plumbv1.ConditionReady).Message; !strings.Contains(msg, "deploy/config.yaml") {
		t.Errorf("Ready message %q does not name the file", msg)
	}
	if app.Status.Phases.Read.Reason != "InvalidManifest" || app.Status.Phases.Read.ConsecutiveFailures < 1 {
		t.Errorf("read phase status = %+v", app.Status.Phases.Read)
	}
	if !strings.HasSuffix(app.Status.LastAppliedRevision, first) {
		t.Errorf("lastAppliedRevision moved to %s", app.Status.LastAppliedRevision)
	}
	if cm, exists := getConfigMap(t, ns, "settings"); !exists || cm.Data["color"] != "blue" {
		t.Errorf("the last good state was not kept: %v", cm)
	}
}

func TestDeletingAnAppPrunesOrOrphansItsObjects(t *testing.T) {
	setUp(t)
	for _, prune := range []bool{true, false} {
		t.Run(fmt.Sprintf("prune %v", prune), func(t *testing.T) {
			ns := newNamespace(t)
			_, url, first := gitRepo(t, map[string]string{"deploy/config.yaml": configMapYAML("settings", "blue")})
			createApp(t, ns, "doomed", url, func(a *plumbv1.App) { a.Spec.Prune = &prune })
			readyAt(t, ns, "doomed", first)
			if err := k8s.Delete(context.Background(), getApp(t, ns, "doomed")); err != nil {
				t.Fatal(err)
			}
			eventually(t, 60*time.Second, "the App to be gone", func() (bool, string) {
				err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "doomed"}, &plumbv1.App{})
				return apierrors.IsNotFound(err), fmt.Sprint(err)
			})
			_, exists := getConfigMap(t, ns, "settings")
			if exists == prune {
				t.Errorf("prune %v: settings exists = %v after the App was deleted", prune, exists)
			}
		})
	}
}

func findCondition(app *plumbv1.App, condType string) metav1.Condition {
	for _, c := range app.Status.Conditions {
		if c.Type == condType {
			return c
		}
	}
	return metav1.Condition{}
}
