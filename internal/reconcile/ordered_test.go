package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/testenv"
	"github.com/plumb-dev/plumb/queue"
)

// This package's control plane runs no Job controller: the tests end the
// hook Jobs themselves, by writing the status the Job controller would
// (e2e/ordered_test.go runs them on a real one).

// waveConfigMap is a ConfigMap in a sync wave.
func waveConfigMap(name string, wave int) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  annotations:\n    argocd.argoproj.io/sync-wave: %q\n", name, strconv.Itoa(wave))
}

// hookJob is a Job hook of phases, named or (generate) named by a prefix.
func hookJob(name, phases, policy string, generate bool) string {
	field := "name"
	if generate {
		field = "generateName"
	}
	out := fmt.Sprintf("apiVersion: batch/v1\nkind: Job\nmetadata:\n  %s: %s\n  annotations:\n    argocd.argoproj.io/hook: %s\n", field, name, phases)
	if policy != "" {
		out += "    argocd.argoproj.io/hook-delete-policy: " + policy + "\n"
	}
	return out + "spec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n      - name: run\n        image: busybox\n"
}

// hookConfigMap is a passive hook: done once it exists.
func hookConfigMap(name, phases string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  annotations:\n    argocd.argoproj.io/hook: %s\n", name, phases)
}

// endJob writes the status the Job controller would write when the Job
// ends: Complete, or Failed with a reason.
func endJob(t *testing.T, namespace, name string, ok bool) {
	t.Helper()
	ctx := context.Background()
	job := &batchv1.Job{}
	if err := admin(t).Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, job); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	conditions := []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now}}
	if ok {
		job.Status.Succeeded = 1
		job.Status.CompletionTime = &now
		conditions = append([]batchv1.JobCondition{{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now}}, conditions...)
	} else {
		job.Status.Failed = 1
		conditions = []batchv1.JobCondition{
			{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit", LastTransitionTime: now},
			{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit", LastTransitionTime: now},
		}
	}
	job.Status.StartTime = &now
	job.Status.Conditions = conditions
	if err := admin(t).Status().Update(ctx, job); err != nil {
		t.Fatalf("ending Job %s: %v", name, err)
	}
}

// jobsOf lists the hook Jobs of an App's namespace.
func jobsOf(t *testing.T, namespace string) []batchv1.Job {
	t.Helper()
	var jobs batchv1.JobList
	if err := admin(t).List(context.Background(), &jobs, client.InNamespace(namespace)); err != nil {
		t.Fatal(err)
	}
	return jobs.Items
}

// rvOf is the resourceVersion of a ConfigMap of the namespace, as a
// number: the API server's order of writes.
func rvOf(t *testing.T, namespace, name string) int {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := admin(t).Get(context.Background(), types.NamespacedName{Namespace: namespace, Name: name}, cm); err != nil {
		t.Fatalf("ConfigMap %s: %v", name, err)
	}
	rv, err := strconv.Atoi(cm.ResourceVersion)
	if err != nil {
		t.Fatal(err)
	}
	return rv
}

// An ordered sync runs its PreSync hook, then its waves lowest first,
// then its PostSync Job, waited for over ticks; only then is the revision
// applied. The hooks run once: a later tick that changes nothing starts
// no sync and asks the API server nothing about hooks.
func TestAnOrderedSyncRunsHooksAndWavesInOrder(t *testing.T) {
	_, repo := newRepo(t, map[string]string{
		"deploy/presync.yaml":  hookConfigMap("schema", "PreSync"),
		"deploy/first.yaml":    waveConfigMap("first", -1),
		"deploy/second.yaml":   waveConfigMap("second", 0),
		"deploy/third.yaml":    waveConfigMap("third", 5),
		"deploy/postsync.yaml": hookJob("smoke-", "PostSync", "HookSucceeded", true),
	})
	app := newApp(t, repo, noWait)
	key := client.ObjectKeyFromObject(app)
	h := newHarness(t)

	got := h.tick(t, key, queue.WakeTimer)
	sync := got.Status.Sync
	if sync == nil || sync.Phase != plumbv1.SyncPhasePostSync || !sync.Install {
		t.Fatalf("status.sync = %+v, want the install sync waiting in PostSync", sync)
	}
	if got.Status.LastAppliedRevision != "" {
		t.Errorf("the revision is applied (%s) while its PostSync hook runs", got.Status.LastAppliedRevision)
	}
	if ready := apimeta.FindStatusCondition(got.Status.Conditions, plumbv1.ConditionReady); ready == nil || ready.Status != metav1.ConditionUnknown ||
		!strings.Contains(ready.Message, "PostSync hook Job/"+app.Namespace+"/smoke-") {
		t.Errorf("Ready = %+v, want Unknown saying the PostSync hook runs", ready)
	}
	schema, first, second, third := rvOf(t, app.Namespace, "schema"), rvOf(t, app.Namespace, "first"), rvOf(t, app.Namespace, "second"), rvOf(t, app.Namespace, "third")
	if !(schema < first && first < second && second < third) {
		t.Errorf("written in the order PreSync %d, wave -1 %d, wave 0 %d, wave 5 %d; want that order", schema, first, second, third)
	}
	jobs := jobsOf(t, app.Namespace)
	if len(jobs) != 1 || !strings.HasPrefix(jobs[0].Name, "smoke-") || jobs[0].Labels[plumbv1.LabelAppName] != app.Name {
		t.Fatalf("hook Jobs %v, want one smoke-* with the App's labels", jobs)
	}
	if rv, _ := strconv.Atoi(jobs[0].ResourceVersion); rv < third {
		t.Errorf("the PostSync Job (%d) was created before the last wave (%d)", rv, third)
	}
	for _, e := range got.Status.Inventory.Entries {
		if e.Name == "schema" || e.Kind == "Job" {
			t.Errorf("hook %s/%s is in the inventory", e.Kind, e.Name)
		}
	}

	// Still running: the next tick waits, and creates nothing more.
	got = h.tick(t, key, queue.WakeEvent)
	if got.Status.Sync.Phase != plumbv1.SyncPhasePostSync || len(jobsOf(t, app.Namespace)) != 1 {
		t.Errorf("a tick while the hook runs: phase %s, %d Jobs; want PostSync, 1", got.Status.Sync.Phase, len(jobsOf(t, app.Namespace)))
	}

	// The Job's end is an event of the App's informers, which brings the
	// next tick forward: the wait is not the 15-second poll's.
	events := h.enqueued.Load() + h.healthEvents.Load()
	endJob(t, app.Namespace, jobs[0].Name, true)
	eventually(t, func() bool { return h.enqueued.Load()+h.healthEvents.Load() > events })
	got = h.tick(t, key, queue.WakeEvent)
	ready(t, got)
	if got.Status.Sync.Phase != plumbv1.SyncPhaseSucceeded || got.Status.LastAppliedRevision != got.Status.Sync.Revision {
		t.Fatalf("after the hook ended: sync %+v, applied %s; want Succeeded and the revision applied", got.Status.Sync, got.Status.LastAppliedRevision)
	}
	waitGone(t, admin(t), &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: app.Namespace, Name: jobs[0].Name}})
	hooks := got.Status.Sync.Hooks
	if len(hooks) != 2 || hooks[0].Name != "schema" || hooks[0].Status != plumbv1.HookSucceeded ||
		hooks[1].Name != jobs[0].Name || hooks[1].GenerateName != "smoke-" || hooks[1].Status != plumbv1.HookSucceeded {
		t.Errorf("status.sync.hooks = %+v, want schema and the Job, both Succeeded", hooks)
	}

	// Nothing changes: no sync, no hook, no request at all.
	got = h.tick(t, key, queue.WakeTimer) // the status write of the last one
	h.counter.Reset()
	got = h.tick(t, key, queue.WakeEvent)
	ready(t, got)
	if n := len(jobsOf(t, app.Namespace)); n != 0 {
		t.Errorf("an unchanged tick made %d hook Jobs", n)
	}
	if reqs := h.counter.Take(); len(reqs) != 0 {
		t.Errorf("an unchanged tick made requests: %v", reqs)
	}
}

// A PreSync hook that fails stops the sync: no object of its waves is
// applied, the SyncFail hook runs, the Apply phase fails naming the hook,
// and later ticks do not try again (nor run its hooks) until a sync is
// asked for.
func TestAFailedPreSyncHookRunsSyncFailAndAppliesNothing(t *testing.T) {
	_, repo := newRepo(t, map[string]string{
		"deploy/migrate.yaml": hookJob("migrate", "PreSync", "", false),
		"deploy/app.yaml":     waveConfigMap("app", 0),
		"deploy/later.yaml":   waveConfigMap("later", 1),
		"deploy/cleanup.yaml": hookJob("cleanup", "SyncFail", "", false),
	})
	app := newApp(t, repo, noWait)
	key := client.ObjectKeyFromObject(app)
	h := newHarness(t)
	notifier := &recordingNotifier{}
	h.r.Notifier = notifier

	got := h.tick(t, key, queue.WakeTimer)
	if got.Status.Sync == nil || got.Status.Sync.Phase != plumbv1.SyncPhasePreSync {
		t.Fatalf("status.sync = %+v, want PreSync waiting for migrate", got.Status.Sync)
	}
	endJob(t, app.Namespace, "migrate", false)
	got = h.tick(t, key, queue.WakeEvent)
	if got.Status.Sync.Phase != plumbv1.SyncPhaseSyncFail || !strings.Contains(got.Status.Sync.Failure, "migrate failed") {
		t.Fatalf("status.sync = %+v, want SyncFail running its hook, the failure kept", got.Status.Sync)
	}
	endJob(t, app.Namespace, "cleanup", true)
	got = h.tick(t, key, queue.WakeEvent)
	msg := failed(t, got, PhaseApply, plumbv1.ReasonApplyFailed, "SyncFailed")
	if !strings.Contains(msg, "PreSync hook Job/"+app.Namespace+"/migrate failed: the Job failed: BackoffLimitExceeded") {
		t.Errorf("the Apply phase's error %q does not name the failed hook and why", msg)
	}
	if len(notifier.events) < 2 || notifier.events[0].Kind != plumbv1.EventRevisionPending {
		t.Errorf("notifications %q, want pending, then failed", notifier.kinds())
	}
	if last := notifier.events[len(notifier.events)-1]; last.Kind != plumbv1.EventRevisionFailed || last.Reason != plumbv1.ReasonApplyFailed || !strings.Contains(last.Message, "SyncFailed") {
		t.Errorf("the failure's notification %+v does not say the sync failed", last)
	}
	if got.Status.Sync.Phase != plumbv1.SyncPhaseFailed {
		t.Errorf("sync phase %s, want Failed", got.Status.Sync.Phase)
	}
	for _, name := range []string{"app", "later"} {
		if err := admin(t).Get(context.Background(), types.NamespacedName{Namespace: app.Namespace, Name: name}, &corev1.ConfigMap{}); err == nil {
			t.Errorf("ConfigMap %s was applied after its PreSync hook failed", name)
		}
	}
	if err := admin(t).Get(context.Background(), types.NamespacedName{Namespace: app.Namespace, Name: "cleanup"}, &batchv1.Job{}); err != nil {
		t.Errorf("the SyncFail hook did not run: %v", err)
	}

	// Later ticks fail the same way and run nothing again.
	migrate := &batchv1.Job{}
	if err := admin(t).Get(context.Background(), types.NamespacedName{Namespace: app.Namespace, Name: "migrate"}, migrate); err != nil {
		t.Fatal(err)
	}
	got = h.tick(t, key, queue.WakeTimer)
	failed(t, got, PhaseApply, plumbv1.ReasonApplyFailed, "SyncFailed")
	again := &batchv1.Job{}
	if err := admin(t).Get(context.Background(), types.NamespacedName{Namespace: app.Namespace, Name: "migrate"}, again); err != nil || again.UID != migrate.UID {
		t.Errorf("a tick after the failed sync ran the hook again (%v)", err)
	}

	// A sync request syncs again: the hook is created anew (BeforeHookCreation).
	updateApp(t, h, key, func(a *plumbv1.App) {
		a.Annotations = map[string]string{plumbv1.AnnotationSyncRequestedAt: "2026-12-07T08:00:00Z"}
	})
	got = h.tick(t, key, queue.WakeEvent) // the last run is deleted first (BeforeHookCreation)
	if !strings.Contains(got.Status.Sync.Message, "its last run is being deleted") {
		t.Errorf("after a sync request: %+v, want the last run of migrate being deleted", got.Status.Sync)
	}
	waitGone(t, admin(t), &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: app.Namespace, Name: "migrate"}})
	got = h.tick(t, key, queue.WakeEvent) // then made again
	if err := admin(t).Get(context.Background(), types.NamespacedName{Namespace: app.Namespace, Name: "migrate"}, again); err != nil || again.UID == migrate.UID {
		t.Errorf("after a sync request: Job migrate %v (%v), want it created again", again.UID, err)
	}
	if got.Status.Sync.Phase != plumbv1.SyncPhasePreSync {
		t.Errorf("after a sync request: phase %s (%s), want PreSync running the hook again", got.Status.Sync.Phase, got.Status.Sync.Message)
	}
}

// A wave whose objects are not healthy holds back the next: here a
// Deployment (no controller makes it available in this control plane),
// until the test writes the status a controller would.
func TestAWaveWaitsUntilTheLastIsHealthy(t *testing.T) {
	deployment := "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: db\n  annotations:\n    argocd.argoproj.io/sync-wave: \"1\"\n" +
		"spec:\n  replicas: 1\n  selector: {matchLabels: {app: db}}\n  template:\n    metadata: {labels: {app: db}}\n    spec:\n      containers: [{name: db, image: postgres}]\n"
	_, repo := newRepo(t, map[string]string{
		"deploy/first.yaml": waveConfigMap("first", 0),
		"deploy/db.yaml":    deployment,
		"deploy/app.yaml":   waveConfigMap("app", 2),
	})
	app := newApp(t, repo, noWait)
	key := client.ObjectKeyFromObject(app)
	h := newHarness(t)

	// Three waves, the second not healthy: the third waits.
	got := h.tick(t, key, queue.WakeTimer)
	for range 2 { // the next ticks wait too
		if got.Status.Sync == nil || got.Status.Sync.Wave == nil || *got.Status.Sync.Wave != 1 ||
			!strings.Contains(got.Status.Sync.Message, "Deployment") {
			t.Fatalf("status.sync = %+v, want waiting in wave 1 for the Deployment", got.Status.Sync)
		}
		if err := admin(t).Get(context.Background(), types.NamespacedName{Namespace: app.Namespace, Name: "app"}, &corev1.ConfigMap{}); err == nil {
			t.Fatal("wave 2 was applied before wave 1 was healthy")
		}
		got = h.tick(t, key, queue.WakeEvent)
	}
	d := &appsv1.Deployment{}
	if err := admin(t).Get(context.Background(), types.NamespacedName{Namespace: app.Namespace, Name: "db"}, d); err != nil {
		t.Fatalf("wave 1 was not applied: %v", err)
	}
	if first, _ := strconv.Atoi(d.ResourceVersion); rvOf(t, app.Namespace, "first") > first {
		t.Error("wave 0 was written after wave 1")
	}
	markAvailable(t, h, app.Namespace, "db")
	got = h.tick(t, key, queue.WakeEvent)
	if got.Status.Sync.Phase != plumbv1.SyncPhaseSucceeded {
		t.Fatalf("after the Deployment became available: sync %+v, want Succeeded", got.Status.Sync)
	}
	if err := admin(t).Get(context.Background(), types.NamespacedName{Namespace: app.Namespace, Name: "app"}, &corev1.ConfigMap{}); err != nil {
		t.Errorf("wave 2 after wave 1 became healthy: %v", err)
	}
}

// markAvailable writes the status the Deployment controller writes for a
// rolled-out Deployment, and waits for the informer to see it.
func markAvailable(t *testing.T, h *harness, namespace, name string) {
	t.Helper()
	ctx := context.Background()
	d := &appsv1.Deployment{}
	if err := admin(t).Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, d); err != nil {
		t.Fatal(err)
	}
	d.Status.ObservedGeneration = d.Generation
	d.Status.Replicas, d.Status.UpdatedReplicas, d.Status.ReadyReplicas, d.Status.AvailableReplicas = 1, 1, 1, 1
	d.Status.Conditions = []appsv1.DeploymentCondition{{Type: "Available", Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable"},
		{Type: "Progressing", Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable"}}
	if err := admin(t).Status().Update(ctx, d); err != nil {
		t.Fatal(err)
	}
	waitCached(t, h, d)
}

// Objects that left Git are pruned in reverse wave order: the highest
// wave first.
func TestPruneGoesFromTheHighestWaveDown(t *testing.T) {
	w, repo := newRepo(t, map[string]string{
		"deploy/a.yaml":    waveConfigMap("a", 0),
		"deploy/b.yaml":    waveConfigMap("b", 1),
		"deploy/c.yaml":    waveConfigMap("c", 2),
		"deploy/stay.yaml": waveConfigMap("stay", 3),
	})
	app := newApp(t, repo, noWait)
	key := client.ObjectKeyFromObject(app)
	h := newHarness(t)
	ready(t, h.tick(t, key, queue.WakeTimer))
	pushed(t, w, map[string]string{"deploy/a.yaml": "", "deploy/b.yaml": "", "deploy/c.yaml": ""})
	h.counter.Reset()
	got := h.tick(t, key, queue.WakeTimer)
	ready(t, got)
	var order []string
	for _, req := range h.counter.Matching("DELETE") {
		order = append(order, req[strings.LastIndex(req, "/")+1:strings.Index(req, "?")])
	}
	if strings.Join(order, ",") != "c,b,a" {
		t.Errorf("pruned in the order %v, want c, b, a (the highest wave first)", order)
	}
}

// Hooks are created as the App's ServiceAccount, and the pre-flight asks
// about them with the objects: a ServiceAccount that may not create Jobs
// fails the tick before anything is applied, its hook or its objects.
func TestHooksNeedTheServiceAccountsRights(t *testing.T) {
	_, repo := newRepo(t, map[string]string{
		"deploy/migrate.yaml": hookJob("migrate-", "PreSync", "", true),
		"deploy/app.yaml":     waveConfigMap("app", 0),
	})
	app := newApp(t, repo, func(a *plumbv1.App) { a.Spec.ServiceAccountName = "deployer"; noWait(a) })
	key := client.ObjectKeyFromObject(app)
	serviceAccount(t, app.Namespace, "deployer", allVerbs...) // ConfigMaps, Secrets, Deployments: no Jobs
	h := newHarnessAs(t, restrictedController(t), Policy{})
	got := h.tick(t, key, queue.WakeTimer)
	msg := failed(t, got, PhaseApply, plumbv1.ReasonApplyFailed, plumbv1.ReasonApplyFailed)
	for _, want := range []string{"jobs", "system:serviceaccount:" + app.Namespace + ":deployer", "nothing was applied or pruned"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Ready message %q does not name %q", msg, want)
		}
	}
	if n := len(jobsOf(t, app.Namespace)); n != 0 {
		t.Errorf("%d hook Jobs created", n)
	}
	if err := admin(t).Get(context.Background(), types.NamespacedName{Namespace: app.Namespace, Name: "app"}, &corev1.ConfigMap{}); err == nil {
		t.Error("ConfigMap app was applied")
	}
}

// helm.sh/resource-policy: keep is plumb's prune guard: an object so
// annotated that leaves Git is kept, and said to be.
func TestHelmsKeepPolicyKeepsAnObjectFromPruning(t *testing.T) {
	w, repo := newRepo(t, map[string]string{
		"deploy/data.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: data\n  annotations:\n    helm.sh/resource-policy: keep\n",
		"deploy/tmp.yaml":  configMapYAML("tmp"),
		"deploy/stay.yaml": configMapYAML("stay"),
	})
	app := newApp(t, repo, noWait)
	key := client.ObjectKeyFromObject(app)
	h := newHarness(t)
	ready(t, h.tick(t, key, queue.WakeTimer))
	pushed(t, w, map[string]string{"deploy/data.yaml": "", "deploy/tmp.yaml": ""})
	got := h.tick(t, key, queue.WakeTimer)
	if err := admin(t).Get(context.Background(), types.NamespacedName{Namespace: app.Namespace, Name: "data"}, &corev1.ConfigMap{}); err != nil {
		t.Errorf("the kept ConfigMap was pruned: %v", err)
	}
	waitGone(t, admin(t), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: app.Namespace, Name: "tmp"}})
	if len(got.Status.Kept) != 1 || got.Status.Kept[0].Name != "data" || got.Status.Kept[0].Reason != "ResourcePolicyKeep" {
		t.Errorf("status.kept = %+v, want data kept (ResourcePolicyKeep)", got.Status.Kept)
	}
	// The cache holds the policy: an unchanged tick asks nothing about it.
	ready(t, h.tick(t, key, queue.WakeTimer))
	h.counter.Reset()
	ready(t, h.tick(t, key, queue.WakeEvent))
	if reqs := h.counter.Take(); len(reqs) != 0 {
		t.Errorf("an unchanged tick with a kept object made requests: %v", reqs)
	}
}

// A revision pushed while a sync's hook runs waits for it: the running
// Job is neither deleted nor run twice at once; once it ended, the new
// revision's sync starts.
func TestANewRevisionWaitsForTheRunningHooks(t *testing.T) {
	w, repo := newRepo(t, map[string]string{
		"deploy/migrate.yaml": hookJob("migrate", "PreSync", "", false),
		"deploy/app.yaml":     waveConfigMap("app", 0),
	})
	app := newApp(t, repo, noWait)
	key := client.ObjectKeyFromObject(app)
	h := newHarness(t)
	first := h.tick(t, key, queue.WakeTimer)
	running := &batchv1.Job{}
	if err := admin(t).Get(context.Background(), types.NamespacedName{Namespace: app.Namespace, Name: "migrate"}, running); err != nil {
		t.Fatal(err)
	}
	pushed(t, w, map[string]string{"deploy/app.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata: {v: \"2\"}\n"})
	got := h.tick(t, key, queue.WakeTimer)
	if got.Status.Sync.Revision != first.Status.Sync.Revision || !strings.Contains(got.Status.Sync.Message, "waits for PreSync hook Job/"+app.Namespace+"/migrate") {
		t.Errorf("status.sync = %+v, want the new revision waiting for the running hook", got.Status.Sync)
	}
	still := &batchv1.Job{}
	if err := admin(t).Get(context.Background(), types.NamespacedName{Namespace: app.Namespace, Name: "migrate"}, still); err != nil || still.UID != running.UID {
		t.Fatalf("the running hook Job: %v (%v), want it left running", still.UID, err)
	}
	endJob(t, app.Namespace, "migrate", true)
	got = h.tick(t, key, queue.WakeEvent)
	if got.Status.Sync.Revision == first.Status.Sync.Revision {
		t.Errorf("after the hook ended: status.sync = %+v, want the new revision's sync", got.Status.Sync)
	}
}

// A revision that changes none of the App's objects (a commit elsewhere
// in the repository) is the same sync, at a later revision: no hook runs,
// nor for a drift healed after it, nor for a change of the App's spec
// that changes no object; an object kept from pruning changes nothing.
func TestARevisionThatChangesNothingRunsNoHook(t *testing.T) {
	w, repo := newRepo(t, map[string]string{
		"deploy/schema.yaml": hookConfigMap("schema", "PreSync"),
		"deploy/app.yaml":    waveConfigMap("app", 0),
		"deploy/more.yaml":   waveConfigMap("more", 1),
	})
	app := newApp(t, repo, noWait)
	key := client.ObjectKeyFromObject(app)
	h := newHarness(t)
	ready(t, h.tick(t, key, queue.WakeTimer))
	schema := rvOf(t, app.Namespace, "schema")
	next := pushed(t, w, map[string]string{"README.md": "not deployed\n"})
	got := h.tick(t, key, queue.WakeTimer)
	ready(t, got)
	if !strings.HasSuffix(got.Status.Sync.Revision, next) || got.Status.Sync.Phase != plumbv1.SyncPhaseSucceeded || len(got.Status.Sync.Hooks) != 1 {
		t.Errorf("status.sync = %+v, want the same sync, at the new revision, its one hook run once", got.Status.Sync)
	}
	if !strings.HasSuffix(got.Status.LastAppliedRevision, next) {
		t.Errorf("applied %s, want the new revision %s", got.Status.LastAppliedRevision, next)
	}
	cm := &corev1.ConfigMap{}
	if err := admin(t).Get(context.Background(), types.NamespacedName{Namespace: app.Namespace, Name: "app"}, cm); err != nil {
		t.Fatal(err)
	}
	cm.Data = map[string]string{"drifted": "yes"}
	if err := admin(t).Update(context.Background(), cm, client.FieldOwner("kubectl-edit")); err != nil {
		t.Fatal(err)
	}
	waitCached(t, h, cm)
	ready(t, h.tick(t, key, queue.WakeEvent))
	updateApp(t, h, key, func(a *plumbv1.App) { a.Spec.Interval = &metav1.Duration{Duration: 7 * time.Minute} })
	ready(t, h.tick(t, key, queue.WakeEvent))
	if got := rvOf(t, app.Namespace, "schema"); got != schema {
		t.Errorf("the PreSync hook was written again (%d, was %d) by a no-op revision, a heal or a spec change", got, schema)
	}
}

// An object kept from pruning (here by plumb.dev/prune: disabled) is no
// change: a commit elsewhere in the repository runs no hook after it.
func TestAKeptObjectIsNoChange(t *testing.T) {
	w, repo := newRepo(t, map[string]string{
		"deploy/schema.yaml": hookConfigMap("schema", "PreSync"),
		"deploy/app.yaml":    waveConfigMap("app", 0),
		"deploy/data.yaml":   "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: data\n  annotations:\n    plumb.dev/prune: disabled\n",
	})
	app := newApp(t, repo, noWait)
	key := client.ObjectKeyFromObject(app)
	h := newHarness(t)
	ready(t, h.tick(t, key, queue.WakeTimer))
	pushed(t, w, map[string]string{"deploy/data.yaml": ""})
	h.tick(t, key, queue.WakeTimer) // a sync of the new content: the hook's last run is deleted, then it runs again
	waitGone(t, admin(t), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: app.Namespace, Name: "schema"}})
	ready(t, h.tick(t, key, queue.WakeEvent))
	schema := rvOf(t, app.Namespace, "schema")
	pushed(t, w, map[string]string{"README.md": "elsewhere\n"})
	got := h.tick(t, key, queue.WakeTimer)
	ready(t, got)
	if len(got.Status.Kept) != 1 || rvOf(t, app.Namespace, "schema") != schema {
		t.Errorf("kept %+v; the hook written again: %v; want data kept and no hook run", got.Status.Kept, rvOf(t, app.Namespace, "schema") != schema)
	}
}

// A sync that failed stays failed for a commit elsewhere in the repository
// (the same content): it is not taken for synced.
func TestAFailedSyncIsNotTakenForSyncedByALaterRevision(t *testing.T) {
	w, repo := newRepo(t, map[string]string{
		"deploy/smoke.yaml": hookJob("smoke", "PostSync", "", false),
		"deploy/app.yaml":   waveConfigMap("app", 0),
	})
	app := newApp(t, repo, noWait)
	key := client.ObjectKeyFromObject(app)
	h := newHarness(t)
	h.tick(t, key, queue.WakeTimer)
	endJob(t, app.Namespace, "smoke", false)
	failed(t, h.tick(t, key, queue.WakeEvent), PhaseApply, plumbv1.ReasonApplyFailed, "SyncFailed")
	pushed(t, w, map[string]string{"README.md": "elsewhere\n"})
	got := h.tick(t, key, queue.WakeTimer)
	failed(t, got, PhaseApply, plumbv1.ReasonApplyFailed, "SyncFailed")
	if got.Status.LastAppliedRevision != "" {
		t.Errorf("applied %s after a failed sync", got.Status.LastAppliedRevision)
	}
}

// A controller restarted in the middle of a wave goes on from status.sync:
// the PreSync hook that ended is not run again.
func TestARestartedControllerGoesOnWithoutRunningAHookTwice(t *testing.T) {
	deployment := "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: db\nspec:\n  replicas: 1\n  selector: {matchLabels: {app: db}}\n" +
		"  template:\n    metadata: {labels: {app: db}}\n    spec:\n      containers: [{name: db, image: postgres}]\n"
	_, repo := newRepo(t, map[string]string{
		"deploy/migrate.yaml": hookJob("migrate-", "PreSync", "", true),
		"deploy/db.yaml":      deployment,
		"deploy/app.yaml":     waveConfigMap("app", 1),
	})
	app := newApp(t, repo, noWait)
	key := client.ObjectKeyFromObject(app)
	h := newHarness(t)
	h.tick(t, key, queue.WakeTimer)
	jobs := jobsOf(t, app.Namespace)
	if len(jobs) != 1 {
		t.Fatalf("%d Jobs, want the PreSync one", len(jobs))
	}
	endJob(t, app.Namespace, jobs[0].Name, true)
	got := h.tick(t, key, queue.WakeEvent)
	if got.Status.Sync.Phase != plumbv1.SyncPhaseSync || got.Status.Sync.Wave == nil || *got.Status.Sync.Wave != 0 {
		t.Fatalf("status.sync = %+v, want waiting in wave 0", got.Status.Sync)
	}
	restarted := newHarness(t) // nothing remembered but the App's status
	if got = restarted.tick(t, key, queue.WakeTimer); got.Status.Sync.Phase != plumbv1.SyncPhaseSync {
		t.Fatalf("the restarted controller's first tick: status.sync = %+v, want still waiting in wave 0", got.Status.Sync)
	}
	markAvailable(t, restarted, app.Namespace, "db")
	got = restarted.tick(t, key, queue.WakeEvent)
	if got.Status.Sync.Phase != plumbv1.SyncPhaseSucceeded {
		t.Fatalf("after the restart: status.sync = %+v, want Succeeded", got.Status.Sync)
	}
	if n := len(jobsOf(t, app.Namespace)); n != 1 {
		t.Errorf("%d hook Jobs after the restart, want the one that ran", n)
	}
}

// Hooks of one generateName are as many runs; a named hook never takes
// over an object that is not the App's, nor a hook goes where the
// controller's policy keeps objects from going.
func TestHooksAreToldApartAndKeepToTheirOwn(t *testing.T) {
	t.Run("two hooks of one generateName run twice", func(t *testing.T) {
		gen := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  generateName: seed-\n  annotations:\n    argocd.argoproj.io/hook: PreSync\n"
		_, repo := newRepo(t, map[string]string{"deploy/a.yaml": gen, "deploy/b.yaml": gen, "deploy/app.yaml": waveConfigMap("app", 0)})
		app := newApp(t, repo, noWait)
		h := newHarness(t)
		ready(t, h.tick(t, client.ObjectKeyFromObject(app), queue.WakeTimer))
		var cms corev1.ConfigMapList
		if err := admin(t).List(context.Background(), &cms, client.InNamespace(app.Namespace)); err != nil {
			t.Fatal(err)
		}
		seeds := 0
		for _, cm := range cms.Items {
			if strings.HasPrefix(cm.Name, "seed-") {
				seeds++
			}
		}
		if seeds != 2 {
			t.Errorf("%d seed-* hooks, want 2", seeds)
		}
	})
	t.Run("a named hook does not take over another's object", func(t *testing.T) {
		_, repo := newRepo(t, map[string]string{"deploy/schema.yaml": hookConfigMap("schema", "PreSync"), "deploy/app.yaml": waveConfigMap("app", 0)})
		app := newApp(t, repo, noWait)
		theirs := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: app.Namespace, Name: "schema", Labels: map[string]string{plumbv1.LabelAppName: "other", plumbv1.LabelAppNamespace: app.Namespace}}}
		if err := admin(t).Create(context.Background(), theirs); err != nil {
			t.Fatal(err)
		}
		h := newHarness(t)
		got := h.tick(t, client.ObjectKeyFromObject(app), queue.WakeTimer)
		msg := failed(t, got, PhaseApply, plumbv1.ReasonApplyFailed, "SyncFailed")
		if !strings.Contains(msg, "ConfigMap "+app.Namespace+"/schema exists and is not this App's") {
			t.Errorf("Ready message %q does not say the hook's name is taken", msg)
		}
		after := &corev1.ConfigMap{}
		if err := admin(t).Get(context.Background(), client.ObjectKeyFromObject(theirs), after); err != nil || after.UID != theirs.UID || after.Labels[plumbv1.LabelAppName] != "other" {
			t.Errorf("the other App's ConfigMap: %v %v (%v), want it as it was", after.UID, after.Labels, err)
		}
	})
	t.Run("a hook in another namespace is refused by --no-cross-namespace", func(t *testing.T) {
		other := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: elsewhere\n  namespace: kube-system\n  annotations:\n    argocd.argoproj.io/hook: PreSync\n"
		_, repo := newRepo(t, map[string]string{"deploy/hook.yaml": other, "deploy/app.yaml": waveConfigMap("app", 0)})
		app := newApp(t, repo, noWait)
		h := newHarnessAs(t, cluster.Config, Policy{NoCrossNamespace: true})
		got := h.tick(t, client.ObjectKeyFromObject(app), queue.WakeTimer)
		if cond := apimeta.FindStatusCondition(got.Status.Conditions, plumbv1.ConditionReady); cond == nil || cond.Status != metav1.ConditionFalse || !strings.Contains(cond.Message, "kube-system") {
			t.Errorf("Ready = %+v, want False naming the hook's namespace", cond)
		}
		if err := admin(t).Get(context.Background(), types.NamespacedName{Namespace: "kube-system", Name: "elsewhere"}, &corev1.ConfigMap{}); err == nil {
			t.Error("the hook was created in kube-system")
		}
	})
}

// An object an older plumb applied as an ordinary object, and that is a
// hook now (Helm's pre-install, which a later sync does not run), is left
// where it is, not pruned; a Helm test hook in plain YAML is not applied.
func TestAnObjectThatBecameAHookIsNotPruned(t *testing.T) {
	w, repo := newRepo(t, map[string]string{
		"deploy/password.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: password\n",
		"deploy/sa.yaml":       configMapYAML("sa"),
		"deploy/app.yaml":      configMapYAML("app"),
	})
	app := newApp(t, repo, noWait)
	key := client.ObjectKeyFromObject(app)
	h := newHarness(t)
	ready(t, h.tick(t, key, queue.WakeTimer))
	pushed(t, w, map[string]string{
		"deploy/sa.yaml":       "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: sa\n  annotations:\n    helm.sh/hook: test\n",
		"deploy/password.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: password\n  annotations:\n    helm.sh/hook: pre-install\n",
		"deploy/test.yaml":     "apiVersion: v1\nkind: Pod\nmetadata:\n  name: test\n  annotations:\n    helm.sh/hook: test\nspec:\n  containers: [{name: t, image: busybox}]\n",
	})
	got := h.tick(t, key, queue.WakeTimer)
	ready(t, got)
	for _, name := range []string{"password", "sa"} {
		if err := admin(t).Get(context.Background(), types.NamespacedName{Namespace: app.Namespace, Name: name}, &corev1.ConfigMap{}); err != nil {
			t.Errorf("%s, which became a hook plumb does not run, was pruned: %v", name, err)
		}
	}
	for _, e := range got.Status.Inventory.Entries {
		if e.Name == "password" || e.Name == "test" {
			t.Errorf("%s/%s is in the inventory", e.Kind, e.Name)
		}
	}
	if err := admin(t).Get(context.Background(), types.NamespacedName{Namespace: app.Namespace, Name: "test"}, &corev1.Pod{}); err == nil {
		t.Error("the Helm test hook was applied")
	}
}

// Nothing waits for ever: a wave not healthy within healthTimeout, and a
// hook still running after the App's timeout, fail the sync (the clock is
// the test's).
func TestAnOrderedSyncGivesUpOnAWaveOrAHook(t *testing.T) {
	deployment := "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: db\nspec:\n  replicas: 1\n  selector: {matchLabels: {app: db}}\n" +
		"  template:\n    metadata: {labels: {app: db}}\n    spec:\n      containers: [{name: db, image: postgres}]\n"
	t.Run("a wave above the lowest", func(t *testing.T) {
		_, repo := newRepo(t, map[string]string{"deploy/first.yaml": waveConfigMap("first", 0),
			"deploy/db.yaml":  strings.Replace(deployment, "  name: db\n", "  name: db\n  annotations:\n    argocd.argoproj.io/sync-wave: \"1\"\n", 1),
			"deploy/app.yaml": waveConfigMap("app", 2)})
		app := newApp(t, repo, func(a *plumbv1.App) { noWait(a); a.Spec.HealthTimeout = &metav1.Duration{Duration: time.Minute} })
		key := client.ObjectKeyFromObject(app)
		h := newHarness(t)
		clock := clocktesting.NewFakePassiveClock(time.Now())
		h.r.Clock = clock
		if got := h.tick(t, key, queue.WakeTimer); got.Status.Sync.WaitingSince == nil {
			t.Fatalf("status.sync = %+v, want waiting for wave 1 since now", got.Status.Sync)
		}
		clock.SetTime(clock.Now().Add(40 * time.Second))
		if got := h.tick(t, key, queue.WakeEvent); got.Status.Sync.Phase != plumbv1.SyncPhaseSync {
			t.Fatalf("status.sync = %+v, want still waiting for wave 1", got.Status.Sync)
		}
		clock.SetTime(clock.Now().Add(40 * time.Second))
		got := h.tick(t, key, queue.WakeTimer)
		msg := failed(t, got, PhaseApply, plumbv1.ReasonApplyFailed, "SyncFailed")
		if !strings.Contains(msg, "wave 1 was not healthy within 1m0s (healthTimeout)") || !strings.Contains(msg, "Deployment") {
			t.Errorf("Ready message %q does not say wave 1 timed out on the Deployment", msg)
		}
	})
	t.Run("a hook", func(t *testing.T) {
		_, repo := newRepo(t, map[string]string{"deploy/migrate.yaml": hookJob("migrate", "PreSync", "", false), "deploy/app.yaml": waveConfigMap("app", 0)})
		app := newApp(t, repo, func(a *plumbv1.App) { noWait(a); a.Spec.Timeout = &metav1.Duration{Duration: time.Minute} })
		key := client.ObjectKeyFromObject(app)
		h := newHarness(t)
		clock := clocktesting.NewFakePassiveClock(time.Now())
		h.r.Clock = clock
		h.tick(t, key, queue.WakeTimer)
		clock.SetTime(clock.Now().Add(2 * time.Minute))
		got := h.tick(t, key, queue.WakeTimer)
		msg := failed(t, got, PhaseApply, plumbv1.ReasonApplyFailed, "SyncFailed")
		if !strings.Contains(msg, "PreSync hook Job/"+app.Namespace+"/migrate failed: did not end within 1m0s") {
			t.Errorf("Ready message %q does not say the hook timed out", msg)
		}
	})
}

// A revision of more hook runs than status.sync holds fails the Read
// phase, before anything runs.
func TestAtMostAHundredHookRuns(t *testing.T) {
	files := map[string]string{"deploy/app.yaml": configMapYAML("app")}
	for i := range 51 {
		files[fmt.Sprintf("deploy/hook-%d.yaml", i)] = hookConfigMap(fmt.Sprintf("hook-%d", i), "PreSync,PostSync")
	}
	_, repo := newRepo(t, files)
	app := newApp(t, repo, noWait)
	h := newHarness(t)
	got := h.tick(t, client.ObjectKeyFromObject(app), queue.WakeTimer)
	if msg := failed(t, got, PhaseRead, plumbv1.ReasonReadFailed, "LimitExceeded"); !strings.Contains(msg, "more than 100 hook runs") {
		t.Errorf("Ready message %q does not say there are too many hook runs", msg)
	}
	if err := admin(t).Get(context.Background(), types.NamespacedName{Namespace: app.Namespace, Name: "hook-0"}, &corev1.ConfigMap{}); err == nil {
		t.Error("a hook ran")
	}
}

// A chart's pre-install hook runs on the App's first sync only, its
// pre-upgrade hook on each later one (Argo CD runs both every time), and
// the ordinary objects after them.
func TestHelmInstallAndUpgradeHooksRunEachAtTheirTime(t *testing.T) {
	chart := func(version string) map[string]string {
		hook := func(name, event string) string {
			return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-" + name + "\n  annotations:\n    helm.sh/hook: " + event +
				"\ndata:\n  version: " + version + "\n"
		}
		return map[string]string{
			"templates/app.yaml":     "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-app\ndata:\n  version: " + version + "\n",
			"templates/install.yaml": hook("installed", "pre-install"),
			"templates/upgrade.yaml": hook("upgraded", "pre-upgrade"),
		}
	}
	repo := testenv.StartHelmRepository(t, testenv.HelmRepositoryOptions{Username: "ci", Password: "s3cret-helm"})
	repo.Publish(t, "web", "1.0.0", chart("1.0.0"))
	h := newHarnessAs(t, cluster.Config, Policy{AllowInsecureRegistries: true})
	key := helmApp(t, repo, "^1", &plumbv1.HelmSpec{ReleaseName: "shop"})
	get := func(name string) *corev1.ConfigMap {
		cm := &corev1.ConfigMap{}
		if err := admin(t).Get(context.Background(), types.NamespacedName{Namespace: key.Namespace, Name: name}, cm); err != nil {
			return nil
		}
		return cm
	}

	ready(t, h.tick(t, key, queue.WakeTimer))
	installed := get("shop-installed")
	if installed == nil || get("shop-upgraded") != nil || get("shop-app") == nil {
		t.Fatalf("the install: installed %v, upgraded %v; want the pre-install hook only", installed != nil, get("shop-upgraded") != nil)
	}
	if rvOf(t, key.Namespace, "shop-installed") > rvOf(t, key.Namespace, "shop-app") {
		t.Error("the pre-install hook was written after the chart's objects")
	}
	// The tick after the install reads the same content (its upgrade hooks
	// count in it, though the install did not run them): no sync starts,
	// and status.sync keeps the install's.
	after := h.tick(t, key, queue.WakeTimer)
	if s := after.Status.Sync; s == nil || s.Phase != plumbv1.SyncPhaseSucceeded || !s.Install || len(s.Hooks) != 1 || s.Hooks[0].Name != "shop-installed" {
		t.Errorf("status.sync after the tick that follows the install = %+v, want the install's, with its pre-install hook", s)
	}
	if get("shop-upgraded") != nil {
		t.Error("the tick after the install ran the pre-upgrade hook")
	}

	repo.Publish(t, "web", "1.1.0", chart("1.1.0"))
	got := h.tick(t, key, queue.WakeTimer)
	ready(t, got)
	upgraded := get("shop-upgraded")
	if upgraded == nil || upgraded.Data["version"] != "1.1.0" || rvOf(t, key.Namespace, "shop-upgraded") > rvOf(t, key.Namespace, "shop-app") {
		t.Fatalf("the upgrade: pre-upgrade hook %+v, want it written at 1.1.0 before the chart's objects", upgraded)
	}
	if again := get("shop-installed"); again == nil || again.UID != installed.UID || again.ResourceVersion != installed.ResourceVersion {
		t.Errorf("the pre-install hook was run again by the upgrade")
	}
	for _, hk := range got.Status.Sync.Hooks {
		if hk.Name == "shop-installed" {
			t.Errorf("the upgrade's sync ran the pre-install hook: %+v", got.Status.Sync.Hooks)
		}
	}
}

// A preview lists the hooks the next sync would run, and none once the
// revision is synced.
func TestAPreviewListsTheHooksOfTheNextSync(t *testing.T) {
	_, repo := newRepo(t, map[string]string{
		"deploy/schema.yaml": hookConfigMap("schema", "PreSync"),
		"deploy/app.yaml":    waveConfigMap("app", 0),
		"deploy/smoke.yaml":  hookConfigMap("smoke", "PostSync"),
	})
	app := newApp(t, repo, noWait)
	key := client.ObjectKeyFromObject(app)
	h := newHarness(t)
	current := func() *plumbv1.App {
		a := &plumbv1.App{}
		if err := admin(t).Get(context.Background(), key, a); err != nil {
			t.Fatal(err)
		}
		return a
	}
	preview, err := h.r.Preview(context.Background(), current())
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, hk := range preview.Hooks {
		listed = append(listed, hk.Phase+" "+hk.Name)
	}
	if strings.Join(listed, ",") != "PreSync schema,PostSync smoke" {
		t.Errorf("the preview lists the hooks %v, want PreSync schema, PostSync smoke", listed)
	}
	ready(t, h.tick(t, key, queue.WakeTimer))
	if preview, err = h.r.Preview(context.Background(), current()); err != nil || len(preview.Hooks) != 0 {
		t.Errorf("the preview of a synced revision lists hooks %+v (%v)", preview.Hooks, err)
	}
}

// A sync annotation plumb cannot read fails the Read phase naming the
// object, where Argo CD would take a default.
func TestAnUnreadableWaveFailsTheRead(t *testing.T) {
	_, repo := newRepo(t, map[string]string{
		"deploy/a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  annotations:\n    argocd.argoproj.io/sync-wave: \"1O\"\n",
	})
	app := newApp(t, repo, noWait)
	h := newHarness(t)
	got := h.tick(t, client.ObjectKeyFromObject(app), queue.WakeTimer)
	msg := failed(t, got, PhaseRead, plumbv1.ReasonReadFailed, "InvalidManifest")
	if !strings.Contains(msg, "ConfigMap") || !strings.Contains(msg, `argocd.argoproj.io/sync-wave "1O" is not an integer`) {
		t.Errorf("Ready message %q does not name the object and the wave", msg)
	}
}

// Runs of one generateName are told apart by the order the sync runs
// them, whatever Git's order: each hook runs once.
func TestRunsOfOneGenerateNameFollowTheSyncsOrder(t *testing.T) {
	seed := func(wave int, phases string) string {
		return fmt.Sprintf("apiVersion: batch/v1\nkind: Job\nmetadata:\n  generateName: seed-\n  annotations:\n    argocd.argoproj.io/hook: %s\n    argocd.argoproj.io/sync-wave: %q\n", phases, strconv.Itoa(wave)) +
			"spec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n      - name: run\n        image: busybox\n"
	}
	_, repo := newRepo(t, map[string]string{
		"deploy/a.yaml":   seed(1, "PreSync"), // Git lists it first; it runs second
		"deploy/b.yaml":   seed(0, "PreSync"),
		"deploy/c.yaml":   seed(0, "PostSync"),
		"deploy/app.yaml": waveConfigMap("app", 0),
	})
	app := newApp(t, repo, noWait)
	key := client.ObjectKeyFromObject(app)
	h := newHarness(t)
	var got *plumbv1.App
	for range 3 { // one Job runs at a time: end each as it comes
		got = h.tick(t, key, queue.WakeTimer)
		for _, j := range jobsOf(t, app.Namespace) {
			if len(j.Status.Conditions) == 0 {
				endJob(t, app.Namespace, j.Name, true)
			}
		}
	}
	got = h.tick(t, key, queue.WakeEvent)
	if got.Status.Sync.Phase != plumbv1.SyncPhaseSucceeded {
		t.Fatalf("status.sync = %+v, want Succeeded", got.Status.Sync)
	}
	if n := len(jobsOf(t, app.Namespace)); n != 3 {
		t.Errorf("%d seed-* Jobs, want 3: one run of each hook", n)
	}
	var runs []string
	for _, hk := range got.Status.Sync.Hooks {
		runs = append(runs, fmt.Sprintf("%s/%d", hk.Phase, hk.Wave))
	}
	if strings.Join(runs, ",") != "PreSync/0,PreSync/1,PostSync/0" {
		t.Errorf("runs %v, want PreSync wave 0, PreSync wave 1, PostSync", runs)
	}
}

// A named hook whose last run is still there (its delete policy kept it)
// is deleted and run anew, not taken for this sync's run.
func TestANamedHooksLastRunIsNotTakenForTheNext(t *testing.T) {
	w, repo := newRepo(t, map[string]string{
		"deploy/migrate.yaml": hookJob("migrate", "PreSync", "HookFailed", false),
		"deploy/app.yaml":     waveConfigMap("app", 0),
	})
	app := newApp(t, repo, noWait)
	key := client.ObjectKeyFromObject(app)
	h := newHarness(t)
	h.tick(t, key, queue.WakeTimer)
	endJob(t, app.Namespace, "migrate", true)
	ready(t, h.tick(t, key, queue.WakeEvent))
	first := &batchv1.Job{}
	if err := admin(t).Get(context.Background(), types.NamespacedName{Namespace: app.Namespace, Name: "migrate"}, first); err != nil {
		t.Fatal(err)
	}
	pushed(t, w, map[string]string{"deploy/app.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata: {v: \"2\"}\n"})
	got := h.tick(t, key, queue.WakeTimer)
	if !strings.Contains(got.Status.Sync.Message, "its last run is being deleted") {
		t.Fatalf("status.sync = %+v, want the last run deleted first", got.Status.Sync)
	}
	waitGone(t, admin(t), first)
	got = h.tick(t, key, queue.WakeEvent)
	again := &batchv1.Job{}
	if err := admin(t).Get(context.Background(), types.NamespacedName{Namespace: app.Namespace, Name: "migrate"}, again); err != nil || again.UID == first.UID {
		t.Errorf("the hook's new run: %v (%v), want a new Job", again.UID, err)
	}
	if got.Status.Sync.Phase != plumbv1.SyncPhasePreSync {
		t.Errorf("status.sync = %+v, want PreSync running the new run", got.Status.Sync)
	}
}

// A revision with no hooks (an unordered one) also waits for the running
// hooks of the sync before it.
func TestAnUnorderedRevisionWaitsForTheRunningHooks(t *testing.T) {
	w, repo := newRepo(t, map[string]string{
		"deploy/migrate.yaml": hookJob("migrate", "PreSync", "", false),
		"deploy/app.yaml":     waveConfigMap("app", 0),
	})
	app := newApp(t, repo, noWait)
	key := client.ObjectKeyFromObject(app)
	h := newHarness(t)
	h.tick(t, key, queue.WakeTimer)
	pushed(t, w, map[string]string{"deploy/migrate.yaml": ""})
	got := h.tick(t, key, queue.WakeTimer)
	if !strings.Contains(got.Status.Sync.Message, "waits for PreSync hook Job/"+app.Namespace+"/migrate") {
		t.Errorf("status.sync = %+v, want the unordered revision waiting for the running hook", got.Status.Sync)
	}
	if err := admin(t).Get(context.Background(), types.NamespacedName{Namespace: app.Namespace, Name: "app"}, &corev1.ConfigMap{}); err == nil {
		t.Error("the unordered revision was applied while the hook ran")
	}
	endJob(t, app.Namespace, "migrate", true)
	got = h.tick(t, key, queue.WakeEvent)
	ready(t, got)
	if got.Status.Sync != nil {
		t.Errorf("status.sync = %+v after an unordered revision, want none", got.Status.Sync)
	}
}

// What fails a sync for good, and what only fails a tick.
func TestRefusedTellsARefusalFromAPassingFailure(t *testing.T) {
	gr := schema.GroupResource{Resource: "configmaps"}
	for err, want := range map[error]bool{
		apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "a", nil):                                         true,
		apierrors.NewBadRequest("bad"):                                                                              true,
		apierrors.NewForbidden(gr, "a", errors.New(`admission webhook "policy.example" denied the request`)):        true,
		apierrors.NewForbidden(gr, "a", errors.New("exceeded quota: compute, requested: pods=1")):                   false,
		apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "shop"):                                 false,
		apierrors.NewConflict(gr, "a", errors.New("the object has been modified")):                                  false,
		apierrors.NewServiceUnavailable("etcd"):                                                                     false,
		fmt.Errorf("applying ConfigMap/a: %w", apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "a", nil)): true,
	} {
		if got := refused(err); got != want {
			t.Errorf("refused(%v) = %v, want %v", err, got, want)
		}
	}
}

// A deleted App's finalizer runs its PreDelete hooks (Argo CD's, or Helm's
// pre-delete) before its objects are pruned, and its PostDelete hooks
// after; none of them runs while the App lives. The App goes only when
// they have ended.
func TestTheFinalizerRunsTheDeleteHooksAroundThePrune(t *testing.T) {
	ctx := context.Background()
	c := admin(t)
	_, repo := newRepo(t, map[string]string{
		"deploy/app.yaml":        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ordinary\n",
		"deploy/predelete.yaml":  hookJob("backup", "PreDelete", "", false),
		"deploy/postdelete.yaml": strings.Replace(hookJob("farewell", "PreSync", "", false), "argocd.argoproj.io/hook: PreSync", "helm.sh/hook: post-delete", 1),
	})
	app := newApp(t, repo, noWait)
	key := client.ObjectKeyFromObject(app)
	h := newHarness(t)
	got := h.tick(t, key, queue.WakeTimer)
	ready(t, got)
	if n := len(jobsOf(t, app.Namespace)); n != 0 {
		t.Fatalf("a living App's sync ran %d delete hooks", n)
	}

	if err := c.Delete(ctx, app); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool { // once the App cache has seen the deletion
		_, _ = h.r.Tick(ctx, key, queue.WakeTimer)
		return len(jobsOf(t, app.Namespace)) == 1
	})
	// The PreDelete Job runs: nothing is pruned yet, and the App stays.
	for range 2 {
		outcome, err := h.r.Tick(ctx, key, queue.WakeEvent)
		if err != nil || outcome.Next != queue.Reschedule || outcome.Interval <= 0 || outcome.Interval > syncPollInterval {
			t.Fatalf("a tick while the PreDelete hook runs: %+v, %v; want a poll, no error", outcome, err)
		}
	}
	if n := len(jobsOf(t, app.Namespace)); n != 1 {
		t.Errorf("ticks while the PreDelete hook runs made %d Jobs, want 1", n)
	}
	if err := c.Get(ctx, types.NamespacedName{Namespace: app.Namespace, Name: "ordinary"}, &corev1.ConfigMap{}); err != nil {
		t.Fatalf("the App's object went before its PreDelete hook ended: %v", err)
	}
	live := &plumbv1.App{}
	if err := c.Get(ctx, key, live); err != nil {
		t.Fatalf("the App went before its PreDelete hook ended: %v", err)
	}
	if s := live.Status.Sync; s == nil || s.Phase != plumbv1.SyncPhasePreDelete || len(s.Hooks) != 1 || s.Hooks[0].Name != "backup" || s.Hooks[0].Status != plumbv1.HookRunning {
		t.Errorf("status.sync = %+v, want PreDelete with the backup Job running", live.Status.Sync)
	}
	if err := c.Get(ctx, types.NamespacedName{Namespace: app.Namespace, Name: "farewell"}, &batchv1.Job{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the PostDelete hook ran before the prune: %v", err)
	}

	// The PreDelete Job ends: the objects are pruned, then the PostDelete
	// Job runs, and the App waits for it.
	endJob(t, app.Namespace, "backup", true)
	eventually(t, func() bool { // once the cache has seen the Job end
		_, _ = h.r.Tick(ctx, key, queue.WakeEvent)
		return c.Get(ctx, types.NamespacedName{Namespace: app.Namespace, Name: "farewell"}, &batchv1.Job{}) == nil
	})
	if err := c.Get(ctx, types.NamespacedName{Namespace: app.Namespace, Name: "ordinary"}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("the PostDelete hook runs, and the App's object is still there: %v", err)
	}
	if err := c.Get(ctx, key, live); err != nil || live.Status.Sync == nil || live.Status.Sync.Phase != plumbv1.SyncPhasePostDelete {
		t.Fatalf("while the PostDelete hook runs: %v, status.sync %+v; want the App there, in PostDelete", err, live.Status.Sync)
	}
	backup := &batchv1.Job{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: app.Namespace, Name: "backup"}, backup); err != nil {
		t.Fatalf("the PreDelete Job (BeforeHookCreation) is gone: %v", err)
	}
	if _, err := h.r.Tick(ctx, key, queue.WakeEvent); err != nil {
		t.Errorf("a tick while the PostDelete hook runs: %v", err)
	}
	if again := (&batchv1.Job{}); c.Get(ctx, types.NamespacedName{Namespace: app.Namespace, Name: "backup"}, again) != nil || again.UID != backup.UID {
		t.Error("a tick while the PostDelete hook runs ran the PreDelete hook again")
	}
	endJob(t, app.Namespace, "farewell", true)
	eventually(t, func() bool {
		_, _ = h.r.Tick(ctx, key, queue.WakeEvent)
		return apierrors.IsNotFound(c.Get(ctx, key, &plumbv1.App{}))
	})
}

// A PreDelete hook that fails holds the deletion: nothing is pruned, the
// App stays and says which hook failed, and later ticks do not run it
// again. A new content of the source runs the hooks again.
func TestAFailedPreDeleteHookHoldsTheDeletion(t *testing.T) {
	ctx := context.Background()
	c := admin(t)
	w, repo := newRepo(t, map[string]string{
		"deploy/app.yaml":       "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ordinary\n",
		"deploy/predelete.yaml": hookJob("backup", "PreDelete", "", false),
	})
	app := newApp(t, repo, noWait)
	key := client.ObjectKeyFromObject(app)
	h := newHarness(t)
	if got := h.tick(t, key, queue.WakeTimer); !got.Status.DeleteHooks {
		t.Fatalf("status.deleteHooks is false for a revision with a PreDelete hook")
	}
	if err := c.Delete(ctx, app); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool {
		_, _ = h.r.Tick(ctx, key, queue.WakeTimer)
		return len(jobsOf(t, app.Namespace)) == 1
	})
	first := jobsOf(t, app.Namespace)[0]
	endJob(t, app.Namespace, "backup", false)
	var err error
	eventually(t, func() bool { // once the cache has seen the Job fail
		_, err = h.r.Tick(ctx, key, queue.WakeEvent)
		return err != nil && strings.Contains(err.Error(), "the deletion of App")
	})
	if !strings.Contains(err.Error(), "PreDelete hook Job/"+app.Namespace+"/backup failed: the Job failed: BackoffLimitExceeded") {
		t.Errorf("the deletion's error %q does not name the failed hook", err)
	}
	if _, err := h.r.Tick(ctx, key, queue.WakeTimer); err == nil {
		t.Error("a later tick let the deletion go on after the PreDelete hook failed")
	}
	if jobs := jobsOf(t, app.Namespace); len(jobs) != 1 || jobs[0].UID != first.UID {
		t.Errorf("later ticks ran the failed hook again: %v", jobs)
	}
	live := &plumbv1.App{}
	if err := c.Get(ctx, key, live); err != nil || live.Status.Sync == nil || !strings.Contains(live.Status.Sync.Failure, "backup failed") {
		t.Fatalf("the App %v: status.sync %+v, want it kept, saying the hook failed", err, live.Status.Sync)
	}
	if r := apimeta.FindStatusCondition(live.Status.Conditions, plumbv1.ConditionReady); r == nil || r.Status != metav1.ConditionFalse ||
		!strings.Contains(r.Message, "the deletion of the App waits: PreDelete hook Job/"+app.Namespace+"/backup failed") {
		t.Errorf("Ready = %+v, want False saying the deletion waits for the failed hook", r)
	}
	if err := c.Get(ctx, types.NamespacedName{Namespace: app.Namespace, Name: "ordinary"}, &corev1.ConfigMap{}); err != nil {
		t.Fatalf("an object was pruned though the PreDelete hook failed: %v", err)
	}

	// A fixed hook is pushed: it runs anew (its last run deleted first), and
	// once it succeeds the deletion goes on.
	pushed(t, w, map[string]string{"deploy/predelete.yaml": strings.Replace(hookJob("backup", "PreDelete", "", false), "image: busybox", "image: busybox:1.37", 1)})
	eventually(t, func() bool {
		_, _ = h.r.Tick(ctx, key, queue.WakeTimer)
		jobs := jobsOf(t, app.Namespace)
		return len(jobs) == 1 && jobs[0].UID != first.UID
	})
	endJob(t, app.Namespace, "backup", true)
	eventually(t, func() bool {
		_, _ = h.r.Tick(ctx, key, queue.WakeEvent)
		return apierrors.IsNotFound(c.Get(ctx, key, &plumbv1.App{}))
	})
	waitGone(t, c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: app.Namespace, Name: "ordinary"}})
}

// A deleted App whose delete hooks cannot run (here its source no longer
// renders) is held for its timeout from the first error, pruning nothing,
// then its hooks are given up with an Event, and it goes, its objects left
// in place (nothing is pruned for an error). An App without delete hooks does
// not read its source to be deleted.
func TestDeleteHooksThatCannotRunAreGivenUpAfterTheTimeout(t *testing.T) {
	ctx := context.Background()
	c := admin(t)
	w, repo := newRepo(t, map[string]string{
		"deploy/app.yaml":       "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ordinary\n",
		"deploy/predelete.yaml": hookConfigMap("backup", "PreDelete"),
	})
	app := newApp(t, repo, func(a *plumbv1.App) { noWait(a); a.Spec.Timeout = &metav1.Duration{Duration: time.Minute} })
	key := client.ObjectKeyFromObject(app)
	h := newHarness(t)
	ready(t, h.tick(t, key, queue.WakeTimer))
	pushed(t, w, map[string]string{"deploy/predelete.yaml": "kind: [unclosed\n"})
	if err := c.Delete(ctx, app); err != nil {
		t.Fatal(err)
	}
	var err error
	eventually(t, func() bool { // once the App cache has seen the deletion
		_, err = h.r.Tick(ctx, key, queue.WakeTimer)
		return err != nil && strings.Contains(err.Error(), "the PreDelete hooks of deleted App")
	})
	if !strings.Contains(err.Error(), "deploy/predelete.yaml:1: invalid YAML") {
		t.Errorf("the held deletion's error %q does not say why", err)
	}
	if err := c.Get(ctx, types.NamespacedName{Namespace: app.Namespace, Name: "ordinary"}, &corev1.ConfigMap{}); err != nil {
		t.Fatalf("an object was pruned before the delete hooks were given up: %v", err)
	}
	h.recorded()
	clock := clocktesting.NewFakePassiveClock(time.Now().Add(2 * time.Minute))
	h.r.Clock = clock
	if _, err := h.r.Tick(ctx, key, queue.WakeTimer); err != nil {
		t.Fatalf("the tick after the timeout: %v", err)
	}
	if err := c.Get(ctx, key, &plumbv1.App{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the App is still there after its delete hooks were given up: %v", err)
	}
	events := h.recorded()
	if n := countContaining(events, "Warning SyncFailed", "delete hooks were given up in phase PreDelete after 1m0s of errors"); n != 1 {
		t.Errorf("Events saying the hooks were given up = %d, want 1", n)
	}
	// Nothing is pruned for an error: the backup never ran.
	if n := countContaining(events, "Warning Orphaned", "PreDelete hooks could not run", "1 objects are left in place"); n != 1 {
		t.Errorf("Events saying the objects were left = %d, want 1: %q", n, events)
	}
	if err := c.Get(ctx, types.NamespacedName{Namespace: app.Namespace, Name: "ordinary"}, &corev1.ConfigMap{}); err != nil {
		t.Errorf("an object was pruned though the PreDelete hooks were given up: %v", err)
	}
	if err := c.Get(ctx, types.NamespacedName{Namespace: app.Namespace, Name: "backup"}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("the given-up hook was written: %v", err)
	}

	// Without delete hooks, the source is not read: an unreadable one does
	// not hold the deletion.
	w2, repo2 := newRepo(t, map[string]string{"deploy/app.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: plain\n"})
	plain := newApp(t, repo2, noWait)
	plainKey := client.ObjectKeyFromObject(plain)
	h.r.Clock = clocktesting.NewFakePassiveClock(time.Now())
	if got := h.tick(t, plainKey, queue.WakeTimer); got.Status.DeleteHooks {
		t.Fatal("status.deleteHooks is true for a revision without delete hooks")
	}
	pushed(t, w2, map[string]string{"deploy/app.yaml": "kind: [unclosed\n"})
	if err := c.Delete(ctx, plain); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool {
		_, _ = h.r.Tick(ctx, plainKey, queue.WakeTimer)
		return apierrors.IsNotFound(c.Get(ctx, plainKey, &plumbv1.App{}))
	})
}

// Delete hooks that cannot run at all are given up at once, with an
// Event, and the App goes: its namespace is being deleted (no hook can be
// created in it), or a hook would leave the App's namespace under
// --no-cross-namespace (the live App's sync refuses such a revision too).
// An App whose objects are orphaned runs its delete hooks all the same.
func TestDeleteHooksThatCannotRunAtAllAreGivenUpAtOnce(t *testing.T) {
	ctx := context.Background()
	c := admin(t)
	t.Run("the namespace is being deleted", func(t *testing.T) {
		_, repo := newRepo(t, map[string]string{
			"deploy/app.yaml":       "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ordinary\n",
			"deploy/predelete.yaml": hookJob("backup", "PreDelete", "", false),
		})
		app := newApp(t, repo, noWait)
		key := client.ObjectKeyFromObject(app)
		h := newHarness(t)
		ready(t, h.tick(t, key, queue.WakeTimer))
		// This control plane runs no namespace controller: the namespace
		// stays Terminating, as it would while its objects go.
		if err := c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: app.Namespace}}); err != nil {
			t.Fatal(err)
		}
		events := deleteAndFinalize(t, h, app)
		if n := len(jobsOf(t, app.Namespace)); n != 0 {
			t.Errorf("%d delete hooks were created in the terminating namespace", n)
		}
		if n := countContaining(events, "Warning SyncFailed", "delete hooks were not run", "is being deleted"); n != 1 {
			t.Errorf("Events saying the hooks were not run = %d, want 1: %q", n, events)
		}
	})
	t.Run("objects orphaned, not pruned", func(t *testing.T) {
		_, repo := newRepo(t, map[string]string{
			"deploy/app.yaml":        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ordinary\n",
			"deploy/postdelete.yaml": hookConfigMap("farewell", "PostDelete"),
		})
		app := newApp(t, repo, func(a *plumbv1.App) { noWait(a); prune := false; a.Spec.Prune = &prune })
		key := client.ObjectKeyFromObject(app)
		h := newHarness(t)
		ready(t, h.tick(t, key, queue.WakeTimer))
		if err := c.Delete(ctx, app); err != nil {
			t.Fatal(err)
		}
		eventually(t, func() bool {
			_, _ = h.r.Tick(ctx, key, queue.WakeTimer)
			return apierrors.IsNotFound(c.Get(ctx, key, &plumbv1.App{}))
		})
		for _, name := range []string{"ordinary", "farewell"} {
			if err := c.Get(ctx, types.NamespacedName{Namespace: app.Namespace, Name: name}, &corev1.ConfigMap{}); err != nil {
				t.Errorf("ConfigMap %s after the App went, its objects orphaned: %v", name, err)
			}
		}
	})
	t.Run("a hook out of the App's namespace", func(t *testing.T) {
		other := fmt.Sprintf("elsewhere-%d", repos.Add(1))
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: other}}); err != nil {
			t.Fatal(err)
		}
		escaping := strings.Replace(hookConfigMap("planted", "PreDelete"), "  name: planted\n", "  name: planted\n  namespace: "+other+"\n", 1)
		w, repo := newRepo(t, map[string]string{
			"deploy/app.yaml":       "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ordinary\n",
			"deploy/predelete.yaml": hookConfigMap("backup", "PreDelete"),
		})
		app := newApp(t, repo, noWait)
		key := client.ObjectKeyFromObject(app)
		h := newHarnessAs(t, cluster.Config, Policy{NoCrossNamespace: true})
		ready(t, h.tick(t, key, queue.WakeTimer))
		pushed(t, w, map[string]string{"deploy/predelete.yaml": escaping})
		got := h.tick(t, key, queue.WakeTimer)
		if msg := failed(t, got, PhaseRead, plumbv1.ReasonReadFailed, "PolicyViolation"); !strings.Contains(msg, "ConfigMap/"+other+"/planted") {
			t.Errorf("the live App's Read refusal %q does not name the delete hook out of its namespace", msg)
		}
		events := deleteAndFinalize(t, h, app)
		if err := c.Get(ctx, types.NamespacedName{Namespace: other, Name: "planted"}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
			t.Errorf("the delete hook was created in namespace %s: %v", other, err)
		}
		if n := countContaining(events, "Warning SyncFailed", "delete hooks were not run", "--no-cross-namespace"); n != 1 {
			t.Errorf("Events saying the hooks were not run = %d, want 1: %q", n, events)
		}
		if err := c.Get(ctx, types.NamespacedName{Namespace: app.Namespace, Name: "ordinary"}, &corev1.ConfigMap{}); err != nil {
			t.Errorf("an object was pruned though the PreDelete hooks were not run: %v", err)
		}
	})
}

// An App deleted while its sync's PreSync Job runs waits for that Job to
// end before its PreDelete hook starts: a migration and a backup never run
// at once.
func TestADeletionMidSyncWaitsForTheSyncsRunningHooks(t *testing.T) {
	ctx := context.Background()
	c := admin(t)
	_, repo := newRepo(t, map[string]string{
		"deploy/migrate.yaml":   hookJob("migrate", "PreSync", "", false),
		"deploy/app.yaml":       "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ordinary\n",
		"deploy/predelete.yaml": hookConfigMap("backup", "PreDelete"),
	})
	app := newApp(t, repo, noWait)
	key := client.ObjectKeyFromObject(app)
	h := newHarness(t)
	if got := h.tick(t, key, queue.WakeTimer); got.Status.Sync == nil || got.Status.Sync.Phase != plumbv1.SyncPhasePreSync {
		t.Fatalf("status.sync = %+v, want PreSync running migrate", got.Status.Sync)
	}
	if err := c.Delete(ctx, app); err != nil {
		t.Fatal(err)
	}
	var err error
	eventually(t, func() bool { // once the App cache has seen the deletion
		_, err = h.r.Tick(ctx, key, queue.WakeTimer)
		live := &plumbv1.App{}
		return c.Get(ctx, key, live) == nil && live.Status.Sync != nil && strings.Contains(live.Status.Sync.Message, "waits for PreSync hook Job/"+app.Namespace+"/migrate")
	})
	if err != nil {
		t.Errorf("a tick waiting for the running hook: %v", err)
	}
	if err := c.Get(ctx, types.NamespacedName{Namespace: app.Namespace, Name: "backup"}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the PreDelete hook ran while the PreSync Job runs: %v", err)
	}
	endJob(t, app.Namespace, "migrate", true)
	eventually(t, func() bool {
		_, _ = h.r.Tick(ctx, key, queue.WakeEvent)
		return apierrors.IsNotFound(c.Get(ctx, key, &plumbv1.App{}))
	})
	if err := c.Get(ctx, types.NamespacedName{Namespace: app.Namespace, Name: "backup"}, &corev1.ConfigMap{}); err != nil {
		t.Errorf("the PreDelete hook did not run once the PreSync Job ended: %v", err)
	}
}

// Delete hooks run as the App's ServiceAccount, after the pre-flight: a
// delete hook it may not create holds the deletion (nothing created,
// nothing pruned), saying which right is missing.
func TestDeleteHooksNeedTheServiceAccountsRights(t *testing.T) {
	ctx := context.Background()
	c := admin(t)
	_, repo := newRepo(t, map[string]string{
		"deploy/app.yaml":       "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ordinary\n",
		"deploy/predelete.yaml": hookJob("backup", "PreDelete", "", false),
	})
	app := newApp(t, repo, func(a *plumbv1.App) { a.Spec.ServiceAccountName = "deployer"; noWait(a) })
	key := client.ObjectKeyFromObject(app)
	serviceAccount(t, app.Namespace, "deployer", allVerbs...) // ConfigMaps, Secrets, Deployments: no Jobs
	h := newHarnessAs(t, restrictedController(t), Policy{})
	ready(t, h.tick(t, key, queue.WakeTimer))
	if err := c.Delete(ctx, app); err != nil {
		t.Fatal(err)
	}
	var err error
	eventually(t, func() bool { // once the App cache has seen the deletion
		_, err = h.r.Tick(ctx, key, queue.WakeTimer)
		return err != nil && strings.Contains(err.Error(), "the PreDelete hooks of deleted App")
	})
	for _, want := range []string{"jobs", "system:serviceaccount:" + app.Namespace + ":deployer", "no delete hook was run"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the held deletion's error %q does not name %q", err, want)
		}
	}
	if n := len(jobsOf(t, app.Namespace)); n != 0 {
		t.Errorf("%d delete hooks created", n)
	}
	if err := c.Get(ctx, types.NamespacedName{Namespace: app.Namespace, Name: "ordinary"}, &corev1.ConfigMap{}); err != nil {
		t.Errorf("an object was pruned while the delete hooks could not run: %v", err)
	}
}

// A new content pushed while a PreDelete Job runs neither kills that Job
// nor runs the new one beside it: the new content's hooks wait for it.
func TestANewContentDuringADeleteHookWaitsForIt(t *testing.T) {
	ctx := context.Background()
	c := admin(t)
	w, repo := newRepo(t, map[string]string{
		"deploy/app.yaml":       "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ordinary\n",
		"deploy/predelete.yaml": hookJob("backup", "PreDelete", "", false),
	})
	app := newApp(t, repo, noWait)
	key := client.ObjectKeyFromObject(app)
	h := newHarness(t)
	ready(t, h.tick(t, key, queue.WakeTimer))
	if err := c.Delete(ctx, app); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool {
		_, _ = h.r.Tick(ctx, key, queue.WakeTimer)
		return len(jobsOf(t, app.Namespace)) == 1
	})
	first := jobsOf(t, app.Namespace)[0]
	pushed(t, w, map[string]string{"deploy/predelete.yaml": strings.Replace(hookJob("backup", "PreDelete", "", false), "image: busybox", "image: busybox:1.37", 1)})
	eventually(t, func() bool {
		_, _ = h.r.Tick(ctx, key, queue.WakeTimer)
		live := &plumbv1.App{}
		return c.Get(ctx, key, live) == nil && live.Status.Sync != nil && strings.Contains(live.Status.Sync.Message, "waits for PreDelete hook Job/"+app.Namespace+"/backup")
	})
	if jobs := jobsOf(t, app.Namespace); len(jobs) != 1 || jobs[0].UID != first.UID {
		t.Fatalf("the running PreDelete Job was replaced by the new content's: %v", jobs)
	}
	if err := c.Get(ctx, types.NamespacedName{Namespace: app.Namespace, Name: "ordinary"}, &corev1.ConfigMap{}); err != nil {
		t.Fatalf("an object was pruned while the PreDelete Job runs: %v", err)
	}
	endJob(t, app.Namespace, "backup", true)
	eventually(t, func() bool { // the new content's run, once the first ended
		_, _ = h.r.Tick(ctx, key, queue.WakeEvent)
		jobs := jobsOf(t, app.Namespace)
		return len(jobs) == 1 && jobs[0].UID != first.UID
	})
	endJob(t, app.Namespace, "backup", true)
	eventually(t, func() bool {
		_, _ = h.r.Tick(ctx, key, queue.WakeEvent)
		return apierrors.IsNotFound(c.Get(ctx, key, &plumbv1.App{}))
	})
	waitGone(t, c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: app.Namespace, Name: "ordinary"}})
}
