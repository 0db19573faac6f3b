package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// presyncJob is a PreSync hook Job whose Pod kwok runs to completion.
const presyncJob = `apiVersion: batch/v1
kind: Job
metadata:
  generateName: migrate-
  annotations:
    argocd.argoproj.io/hook: PreSync
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: migrate
        image: registry.invalid/migrate:1
`

// waitSync waits until the App's ordered sync ends.
func waitSync(t *testing.T, ns, name string) *plumbv1.App {
	t.Helper()
	var app *plumbv1.App
	eventually(t, 120*time.Second, "the ordered sync of "+name+" to end", func() (bool, string) {
		app = getApp(t, ns, name)
		if app.Status.Sync == nil {
			return false, "no status.sync"
		}
		return app.Status.Sync.Done(), app.Status.Sync.Phase + ": " + app.Status.Sync.Message
	})
	return app
}

// On a control plane with a Job controller, a scheduler and kwok: the
// PreSync Job runs to completion before the Deployment is created, the
// Deployment is waited for until Available before the next wave, and
// the revision is applied when the PostSync hook is done.
func TestAnOrderedSyncWaitsForItsPreSyncJobAndItsWaves(t *testing.T) {
	setUp(t)
	ns := newNamespace(t)
	ctx := context.Background()
	web := strings.Replace(testenv.Fixture(t, "web-deployment.yaml"), "metadata:\n", "metadata:\n  annotations:\n    argocd.argoproj.io/sync-wave: \"0\"\n", 1)
	_, url, commit := gitRepo(t, map[string]string{
		"deploy/migrate.yaml": presyncJob,
		"deploy/web.yaml":     web,
		"deploy/after.yaml":   "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: after\n  annotations:\n    argocd.argoproj.io/sync-wave: \"1\"\n",
		"deploy/smoke.yaml":   "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: smoke\n  annotations:\n    argocd.argoproj.io/hook: PostSync\n",
	})
	// The API server's order of writes (resourceVersions, from watches
	// started before the App): when the Job completed, when the Deployment
	// was created. Creation times alone have a second's resolution.
	clientset := kubernetes.NewForConfigOrDie(cluster.Config)
	watchCtx, stopWatches := context.WithCancel(ctx)
	defer stopWatches()
	jobWatch, err := clientset.BatchV1().Jobs(ns).Watch(watchCtx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	deploymentWatch, err := clientset.AppsV1().Deployments(ns).Watch(watchCtx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	completedAt, createdAt := make(chan int, 1), make(chan int, 1)
	go func() {
		for e := range jobWatch.ResultChan() {
			if job, ok := e.Object.(*batchv1.Job); ok && slices.ContainsFunc(job.Status.Conditions, func(c batchv1.JobCondition) bool {
				return c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue
			}) {
				rv, _ := strconv.Atoi(job.ResourceVersion)
				completedAt <- rv
				return
			}
		}
	}()
	go func() {
		for e := range deploymentWatch.ResultChan() {
			if d, ok := e.Object.(*appsv1.Deployment); ok && e.Type == watch.Added {
				rv, _ := strconv.Atoi(d.ResourceVersion)
				createdAt <- rv
				return
			}
		}
	}()
	createApp(t, ns, "ordered", url, nil)
	app := waitSync(t, ns, "ordered")
	var completed, created int
	for _, wanted := range []struct {
		events <-chan int
		into   *int
		what   string
	}{{completedAt, &completed, "the PreSync Job's completion"}, {createdAt, &created, "the Deployment's creation"}} {
		select {
		case *wanted.into = <-wanted.events:
		case <-time.After(30 * time.Second):
			t.Fatalf("no watch event of %s", wanted.what)
		}
	}
	if created < completed {
		t.Errorf("the Deployment was created (resourceVersion %d) before the PreSync Job completed (%d)", created, completed)
	}
	if app.Status.Sync.Phase != plumbv1.SyncPhaseSucceeded || !strings.HasSuffix(app.Status.LastAppliedRevision, commit) {
		t.Fatalf("sync %+v, applied %s; want Succeeded at %s", app.Status.Sync, app.Status.LastAppliedRevision, commit)
	}
	var jobs batchv1.JobList
	if err := k8s.List(ctx, &jobs, client.InNamespace(ns)); err != nil || len(jobs.Items) != 1 {
		t.Fatalf("hook Jobs: %v, %v; want the one migrate-*", jobs.Items, err)
	}
	job := jobs.Items[0]
	d := &appsv1.Deployment{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, d); err != nil {
		t.Fatal(err)
	}
	if job.Status.CompletionTime == nil || d.CreationTimestamp.Before(job.Status.CompletionTime) {
		t.Errorf("the Deployment was created at %s, the PreSync Job completed at %v: want the Job first", d.CreationTimestamp, job.Status.CompletionTime)
	}
	after := &corev1.ConfigMap{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "after"}, after); err != nil {
		t.Fatal(err)
	}
	if d.Status.AvailableReplicas == 0 {
		t.Errorf("wave 1 was applied, and the Deployment of wave 0 has no replica available")
	}
	hooks := app.Status.Sync.Hooks
	if len(hooks) != 2 || hooks[0].Name != job.Name || hooks[0].Status != plumbv1.HookSucceeded || hooks[1].Name != "smoke" || hooks[1].Status != plumbv1.HookSucceeded {
		t.Errorf("status.sync.hooks = %+v, want the Job and smoke, Succeeded", hooks)
	}
	if !hooks[0].FinishedAt.Time.After(hooks[0].StartedAt.Time.Add(-time.Second)) {
		t.Errorf("the Job hook's times: %+v", hooks[0])
	}
}

// A PreSync Job that fails stops the sync before any object is applied:
// the Apply phase fails naming it, and the SyncFail hook runs.
func TestAFailingPreSyncJobStopsTheSync(t *testing.T) {
	setUp(t)
	ns := newNamespace(t)
	failing := strings.Replace(failingJob, "metadata:\n  name: migrate\n", "metadata:\n  name: migrate\n  annotations:\n    argocd.argoproj.io/hook: PreSync\n", 1)
	_, url, _ := gitRepo(t, map[string]string{
		"deploy/migrate.yaml": failing,
		"deploy/web.yaml":     testenv.Fixture(t, "web-deployment.yaml"),
		"deploy/page.yaml":    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: page\n  annotations:\n    argocd.argoproj.io/hook: SyncFail\n",
	})
	createApp(t, ns, "failing", url, nil)
	app := waitSync(t, ns, "failing")
	if app.Status.Sync.Phase != plumbv1.SyncPhaseFailed {
		t.Fatalf("sync %+v, want Failed", app.Status.Sync)
	}
	ready := findCondition(app, plumbv1.ConditionReady)
	if ready.Status != metav1.ConditionFalse || !strings.Contains(ready.Message, "PreSync hook Job/"+ns+"/migrate failed") {
		t.Errorf("Ready=%s %s: %s; want False naming the PreSync hook", ready.Status, ready.Reason, ready.Message)
	}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "web"}, &appsv1.Deployment{}); err == nil {
		t.Error("the Deployment was created after its PreSync hook failed")
	}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "page"}, &corev1.ConfigMap{}); err != nil {
		t.Errorf("the SyncFail hook did not run: %v", err)
	}
}

// Equivalents of Argo CD's example apps helm-hooks, pre-post-sync and
// sync-waves (e2e/testdata/argo-examples) converge, their hooks run in
// the order the annotations give.
func TestArgoCDsExampleAppsConverge(t *testing.T) {
	setUp(t)
	for _, tc := range []struct {
		name  string
		hooks []string // phase/wave/name (a generateName as name*)
		gone  []string // Jobs their delete policy removed
	}{
		{"helm-hooks", []string{"PreSync/-2/schema-*", "PreSync/-1/maintenance-on", "PostSync/0/maintenance-off"}, nil},
		{"pre-post-sync", []string{"PreSync/0/before", "PostSync/0/after"}, []string{"before", "after"}},
		{"sync-waves", []string{"PreSync/0/schema-*", "Sync/1/maintenance-on", "Sync/3/maintenance-off"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNamespace(t)
			data, err := os.ReadFile(filepath.Join("testdata", "argo-examples", tc.name+".yaml"))
			if err != nil {
				t.Fatal(err)
			}
			_, url, _ := gitRepo(t, map[string]string{"deploy/app.yaml": string(data)})
			createApp(t, ns, "example", url, nil)
			app := waitSync(t, ns, "example")
			if app.Status.Sync.Phase != plumbv1.SyncPhaseSucceeded {
				t.Fatalf("sync %+v, want Succeeded", app.Status.Sync)
			}
			waitReady(t, ns, "example", "Ready", func(_ *plumbv1.App, c *metav1.Condition) bool { return c.Status == metav1.ConditionTrue })
			var runs []string
			for _, h := range app.Status.Sync.Hooks {
				name := h.Name
				if h.GenerateName != "" {
					name = h.GenerateName + "*"
				}
				if h.Status != plumbv1.HookSucceeded {
					t.Errorf("hook %s %s", name, h.Status)
				}
				runs = append(runs, fmt.Sprintf("%s/%d/%s", h.Phase, h.Wave, name))
			}
			if strings.Join(runs, ",") != strings.Join(tc.hooks, ",") {
				t.Errorf("hooks ran %v, want %v", runs, tc.hooks)
			}
			for _, name := range tc.gone {
				eventually(t, 30*time.Second, "Job "+name+" deleted by its HookSucceeded policy", func() (bool, string) {
					err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &batchv1.Job{})
					return apierrors.IsNotFound(err), fmt.Sprint(err)
				})
			}
		})
	}
}

// Three waves, the second not healthy: the third waits for it. A
// controller stopped in the middle of that wave, and another started in
// its place, goes on with the sync from where status.sync says it is: the
// PreSync Job that finished is not run again, the wave is waited for until
// its Deployment is available (here: until its Pods may be scheduled on
// the node), and the rest of the sync runs once.
func TestARestartInTheMiddleOfAWaveRunsNoFinishedHookAgain(t *testing.T) {
	setUp(t)
	ctx := context.Background()
	ns := newNamespace(t)
	label := "e2e.plumb.dev/restart-" + ns
	web := strings.Replace(testenv.Fixture(t, "web-deployment.yaml"), "metadata:\n", "metadata:\n  annotations:\n    argocd.argoproj.io/sync-wave: \"0\"\n", 1)
	web = strings.Replace(web, "    spec:\n", "    spec:\n      nodeSelector: {\""+label+"\": \"yes\"}\n", 1)
	_, url, commit := gitRepo(t, map[string]string{
		"deploy/migrate.yaml": presyncJob,
		"deploy/before.yaml":  "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: before\n  annotations:\n    argocd.argoproj.io/sync-wave: \"-1\"\n",
		"deploy/web.yaml":     web,
		"deploy/after.yaml":   "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: after\n  annotations:\n    argocd.argoproj.io/sync-wave: \"1\"\n",
		"deploy/smoke.yaml":   "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: smoke\n  annotations:\n    argocd.argoproj.io/hook: PostSync\n",
	})
	args := []string{"--leader-elect=false", "--app-label-selector=e2e-shard=restart"}
	first := startController(t, "restart-a", args...)
	createApp(t, ns, "resumed", url, func(a *plumbv1.App) {
		a.Labels = map[string]string{"e2e-shard": "restart"}
		a.Spec.HealthTimeout = &metav1.Duration{Duration: 10 * time.Minute}
	})
	eventually(t, 120*time.Second, "the sync to wait in wave 0 after its PreSync Job", func() (bool, string) {
		s := getApp(t, ns, "resumed").Status.Sync
		if s == nil {
			return false, "no status.sync"
		}
		return s.Phase == plumbv1.SyncPhaseSync && s.Wave != nil && *s.Wave == 0 && len(s.Hooks) == 1 && s.Hooks[0].Status == plumbv1.HookSucceeded,
			fmt.Sprintf("%s: %s; hooks %+v", s.Phase, s.Message, s.Hooks)
	})
	var jobs batchv1.JobList
	if err := k8s.List(ctx, &jobs, client.InNamespace(ns)); err != nil || len(jobs.Items) != 1 {
		t.Fatalf("hook Jobs: %v, %v; want the one migrate-*", jobs.Items, err)
	}
	migrate := jobs.Items[0]
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "before"}, &corev1.ConfigMap{}); err != nil {
		t.Fatalf("wave -1 was not applied: %v", err)
	}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "after"}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Fatalf("wave 1 was applied while wave 0 is not available: %v", err)
	}
	if err := first.stop(); err != nil {
		t.Logf("the first controller's exit: %v", err)
	}

	second := startController(t, "restart-b", args...)
	defer second.stop()
	node := &corev1.Node{}
	if err := k8s.Get(ctx, client.ObjectKey{Name: "kwok-node-0"}, node); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(node.DeepCopy())
	node.Labels[label] = "yes"
	if err := k8s.Patch(ctx, node, patch); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = k8s.Patch(ctx, node, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"`+label+`":null}}}`)))
	})
	app := waitSync(t, ns, "resumed")
	if app.Status.Sync.Phase != plumbv1.SyncPhaseSucceeded || !strings.HasSuffix(app.Status.LastAppliedRevision, commit) {
		t.Fatalf("after the restart: sync %+v, applied %s; want Succeeded at %s\n%s", app.Status.Sync, app.Status.LastAppliedRevision, commit, second.tail(40))
	}
	if err := k8s.List(ctx, &jobs, client.InNamespace(ns)); err != nil || len(jobs.Items) != 1 || jobs.Items[0].UID != migrate.UID {
		t.Errorf("after the restart, hook Jobs %v (%v); want only the first run of migrate", jobs.Items, err)
	}
	hooks := app.Status.Sync.Hooks
	if len(hooks) != 2 || hooks[0].Name != migrate.Name || hooks[1].Name != "smoke" || hooks[1].Status != plumbv1.HookSucceeded {
		t.Errorf("status.sync.hooks = %+v, want migrate once, then smoke", hooks)
	}
	d := &appsv1.Deployment{}
	after := &corev1.ConfigMap{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, d); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "after"}, after); err != nil {
		t.Fatal(err)
	}
	if d.Status.AvailableReplicas == 0 {
		t.Error("the sync ended while the Deployment of wave 0 has no replica available")
	}
}
