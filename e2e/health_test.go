package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// stuckDeployment asks for more CPU than kwok's node has: its pods stay
// Pending, as pods whose image cannot be pulled stay unready on a real
// node, and it never becomes Available.
const stuckDeployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: stuck
spec:
  replicas: 1
  selector:
    matchLabels: {app: stuck}
  template:
    metadata:
      labels: {app: stuck}
    spec:
      containers:
      - name: stuck
        image: registry.invalid/never:1
        resources:
          requests: {cpu: "1000"}
`

// failingJob's pods can never be scheduled (no node matches), and its
// deadline passes after a second: the Job controller marks it Failed.
const failingJob = `apiVersion: batch/v1
kind: Job
metadata:
  name: migrate
spec:
  activeDeadlineSeconds: 1
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      nodeSelector: {plumb.dev/no-such-node: "true"}
      containers:
      - name: migrate
        image: registry.invalid/migrate:1
`

// conditionOf waits until the App's condition condType satisfies want.
func conditionOf(t *testing.T, ns, name, condType, what string, want func(metav1.Condition) bool) (*plumbv1.App, metav1.Condition) {
	t.Helper()
	var app *plumbv1.App
	var cond metav1.Condition
	eventually(t, 90*time.Second, "App "+name+" "+what, func() (bool, string) {
		app = getApp(t, ns, name)
		cond = findCondition(app, condType)
		return want(cond), fmt.Sprintf("%s=%s %s: %s", condType, cond.Status, cond.Reason, cond.Message)
	})
	return app, cond
}

func TestReadyWaitsForARolloutAndNamesOneThatNeverCompletes(t *testing.T) {
	setUp(t)
	ns := newNamespace(t)
	_, url, _ := gitRepo(t, map[string]string{"deploy/web.yaml": testenv.Fixture(t, "web-deployment.yaml")})
	createApp(t, ns, "web", url, nil)

	t.Run("a Deployment that becomes Available: Healthy, then Ready", func(t *testing.T) {
		app, _ := conditionOf(t, ns, "web", plumbv1.ConditionReady, "Ready", func(c metav1.Condition) bool { return c.Status == metav1.ConditionTrue })
		d := &appsv1.Deployment{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "web"}, d); err != nil {
			t.Fatal(err)
		}
		if d.Status.AvailableReplicas != 2 {
			t.Errorf("Ready with %d of 2 replicas available", d.Status.AvailableReplicas)
		}
		if h := findCondition(app, plumbv1.ConditionHealthy); h.Status != metav1.ConditionTrue || h.Reason != plumbv1.ReasonHealthy {
			t.Errorf("Healthy=%s %s: %s", h.Status, h.Reason, h.Message)
		}
		if app.Status.Health == nil || app.Status.Health.Current != 1 || len(app.Status.Health.Unhealthy) != 0 {
			t.Errorf("status.health %+v, want 1 Current", app.Status.Health)
		}
	})

	t.Run("one that never becomes Available: Progressing, then HealthCheckFailed after the timeout, naming it", func(t *testing.T) {
		_, url, _ := gitRepo(t, map[string]string{"deploy/stuck.yaml": stuckDeployment})
		createApp(t, ns, "stuck", url, func(a *plumbv1.App) { a.Spec.HealthTimeout = &metav1.Duration{Duration: 5 * time.Second} })
		// Progressing first: applied, and waiting (polled every 100ms, well
		// within the 5s the wait lasts).
		_, progressing := conditionOf(t, ns, "stuck", plumbv1.ConditionReady, "Progressing", func(c metav1.Condition) bool {
			return c.Reason == plumbv1.ReasonProgressing || c.Reason == plumbv1.ReasonHealthCheckFailed
		})
		if progressing.Status != metav1.ConditionUnknown || progressing.Reason != plumbv1.ReasonProgressing ||
			!strings.Contains(progressing.Message, "waiting for 1 of 1 objects to become healthy") {
			t.Errorf("Ready=%s %s: %s; want Unknown Progressing while it waits", progressing.Status, progressing.Reason, progressing.Message)
		}
		_, cond := conditionOf(t, ns, "stuck", plumbv1.ConditionReady, "HealthCheckFailed", func(c metav1.Condition) bool {
			return c.Reason == plumbv1.ReasonHealthCheckFailed
		})
		if cond.Status != metav1.ConditionFalse || !strings.Contains(cond.Message, "Deployment.apps/"+ns+"/stuck InProgress") ||
			!strings.Contains(cond.Message, "not healthy after 5s") {
			t.Errorf("Ready=%s %s: %s; want False naming the Deployment", cond.Status, cond.Reason, cond.Message)
		}
		events := appEvents(t, ns, "stuck")
		if len(events[plumbv1.ReasonHealthCheckFailed]) == 0 {
			t.Errorf("no HealthCheckFailed Event; Events: %v", events)
		}
	})

	t.Run("a Job that fails: HealthCheckFailed at once, without waiting for the timeout", func(t *testing.T) {
		_, url, _ := gitRepo(t, map[string]string{"deploy/job.yaml": failingJob})
		createApp(t, ns, "job", url, nil) // the default timeout, 5m: far beyond this test's patience
		_, cond := conditionOf(t, ns, "job", plumbv1.ConditionReady, "HealthCheckFailed", func(c metav1.Condition) bool {
			return c.Reason == plumbv1.ReasonHealthCheckFailed
		})
		if cond.Status != metav1.ConditionFalse || !strings.Contains(cond.Message, "1 of 1 objects failed") ||
			!strings.Contains(cond.Message, "Job.batch/"+ns+"/migrate Failed") {
			t.Errorf("Ready=%s %s: %s; want False naming the failed Job", cond.Status, cond.Reason, cond.Message)
		}
	})

	t.Run("wait false: Ready once applied, while the health says what is wrong", func(t *testing.T) {
		ns := newNamespace(t) // the Deployment "stuck" of the App above is that App's
		_, url, _ := gitRepo(t, map[string]string{"deploy/stuck.yaml": stuckDeployment})
		createApp(t, ns, "nowait", url, func(a *plumbv1.App) { a.Spec.Wait = new(bool) })
		app, _ := conditionOf(t, ns, "nowait", plumbv1.ConditionReady, "Ready", func(c metav1.Condition) bool { return c.Status == metav1.ConditionTrue })
		if h := findCondition(app, plumbv1.ConditionHealthy); h.Status == metav1.ConditionTrue || !strings.Contains(h.Message, "stuck InProgress") {
			t.Errorf("Healthy=%s %s: %s; want it not True, naming the Deployment", h.Status, h.Reason, h.Message)
		}
	})
}

// widgetCRD and widget: a custom kind and one object of it, for Apps that
// depend on the App that defines the kind.
const widgetCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.depends.plumb.dev}
spec:
  group: depends.plumb.dev
  names: {kind: Widget, plural: widgets}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`

const widget = `apiVersion: depends.plumb.dev/v1
kind: Widget
metadata: {name: gear}
spec: {teeth: 12}
`

func TestAnAppThatDependsOnAnotherWaitsAndResumesOnItsReadiness(t *testing.T) {
	setUp(t)
	ns := newNamespace(t)
	_, platformURL, _ := gitRepo(t, map[string]string{"deploy/crd.yaml": widgetCRD, "deploy/web.yaml": testenv.Fixture(t, "web-deployment.yaml")})
	_, appURL, _ := gitRepo(t, map[string]string{"deploy/widget.yaml": widget})

	// The App of custom resources comes first: alone it would fail, its
	// kind unknown.
	createApp(t, ns, "gears", appURL, func(a *plumbv1.App) { a.Spec.DependsOn = []plumbv1.AppReference{{Name: "platform"}} })
	t.Run("a dependency that does not exist is reported", func(t *testing.T) {
		conditionOf(t, ns, "gears", plumbv1.ConditionReady, "waiting for platform", func(c metav1.Condition) bool {
			return c.Reason == plumbv1.ReasonDependencyNotReady && strings.Contains(c.Message, "App "+ns+"/platform does not exist")
		})
	})

	createApp(t, ns, "platform", platformURL, nil) // interval 10m, as every App here: no timer tick in the test
	var platformReady, gearsReady metav1.Condition
	t.Run("it waits while its dependency rolls out, then applies on the event of its readiness", func(t *testing.T) {
		_, platformReady = conditionOf(t, ns, "platform", plumbv1.ConditionReady, "Ready", func(c metav1.Condition) bool { return c.Status == metav1.ConditionTrue })
		var app *plumbv1.App
		app, gearsReady = conditionOf(t, ns, "gears", plumbv1.ConditionReady, "Ready", func(c metav1.Condition) bool { return c.Status == metav1.ConditionTrue })
		if observe := app.Status.Phases.Observe; observe.LastFailureTime != nil {
			t.Errorf("the Observe phase failed (%s: %s): the App ran before its dependency", observe.Reason, observe.LastError)
		}
		// With a 10-minute interval only an event can have brought this on;
		// the ticks that waited ran no phase but the Read, and the one that
		// applied is its only tick.
		if got := ticksOf(controller, ns, "gears"); got != 1 {
			t.Errorf("gears ticked %d times through its phases, want 1 (the one its dependency's readiness brought)", got)
		}
		// Measured, not asserted (condition times are to the second).
		t.Logf("gears Ready %s after platform", gearsReady.LastTransitionTime.Sub(platformReady.LastTransitionTime.Time))
	})
}

// apiRequests scrapes a controller's plumb_api_requests_total by verb.
func apiRequests(t *testing.T, p *controllerProcess) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + p.metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		labels, value, ok := strings.Cut(strings.TrimPrefix(line, "plumb_api_requests_total"), " ")
		if !ok || !strings.HasPrefix(line, "plumb_api_requests_total{") {
			continue
		}
		_, verb, _ := strings.Cut(labels, `verb="`)
		verb, _, _ = strings.Cut(verb, `"`)
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatal(err)
		}
		out[verb] += v
	}
	return out
}

func TestARolloutsStatusChangesReassessHealthWithoutGitOrReads(t *testing.T) {
	setUp(t)
	p := startController(t, "health", "--leader-elect=false", "--app-label-selector=e2e-shard=health")
	defer p.stop()
	ns := newNamespace(t)
	_, url, _ := gitRepo(t, map[string]string{"deploy/web.yaml": testenv.Fixture(t, "web-deployment.yaml")})
	repo := path.Base(url)
	createApp(t, ns, "web", url, func(a *plumbv1.App) { a.Labels = map[string]string{"e2e-shard": "health"} })
	conditionOf(t, ns, "web", plumbv1.ConditionReady, "Ready", func(c metav1.Condition) bool { return c.Status == metav1.ConditionTrue })
	eventually(t, 30*time.Second, "the controller's metrics", func() (bool, string) {
		_, err := http.Get("http://" + p.metricsAddr + "/metrics")
		return err == nil, fmt.Sprint(err)
	})
	before, gitBefore, ticksBefore := apiRequests(t, p), gitServer.RequestCounts(repo), ticksOf(p, ns, "web")
	assessed := func() int { return strings.Count(p.tail(100000), "Assessed health") }
	assessedBefore := assessed()

	// A pod of the Deployment goes: its ReplicaSet makes another, and
	// kube-controller-manager writes the Deployment's status as it comes
	// up (kwok runs it) — status only, nothing of plumb's.
	pods := &corev1.PodList{}
	if err := k8s.List(context.Background(), pods, client.InNamespace(ns), client.MatchingLabels{"app": "web"}); err != nil || len(pods.Items) == 0 {
		t.Fatalf("the Deployment's pods: %d (%v)", len(pods.Items), err)
	}
	if err := k8s.Delete(context.Background(), &pods.Items[0]); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "a re-assessment of health", func() (bool, string) {
		return assessed() > assessedBefore, fmt.Sprintf("%d re-assessments", assessed()-assessedBefore)
	})
	conditionOf(t, ns, "web", plumbv1.ConditionReady, "Ready again", func(c metav1.Condition) bool { return c.Status == metav1.ConditionTrue })
	d := &appsv1.Deployment{}
	eventually(t, 60*time.Second, "the Deployment to have 2 available again", func() (bool, string) {
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "web"}, d); err != nil {
			return false, err.Error()
		}
		return d.Status.AvailableReplicas == 2, fmt.Sprintf("%d available", d.Status.AvailableReplicas)
	})
	conditionOf(t, ns, "web", plumbv1.ConditionHealthy, "Healthy", func(c metav1.Condition) bool { return c.Status == metav1.ConditionTrue })

	after, gitAfter := apiRequests(t, p), gitServer.RequestCounts(repo)
	for _, verb := range []string{"get", "list", "watch", "update", "apply", "delete", "deletecollection", "discovery"} {
		if got := after[verb] - before[verb]; got != 0 {
			t.Errorf("%v %s requests during the re-assessments, want none", got, verb)
		}
	}
	// What it may write: the App's status as its health moved, and an
	// Event (created, or patched when repeated) when it turned Healthy.
	n := float64(assessed() - assessedBefore)
	if got := after["patch"] - before["patch"] + after["create"] - before["create"]; got > 2*n {
		t.Errorf("%v writes for %v re-assessments, want at most a status write and an Event each", got, n)
	}
	for kind, count := range gitAfter {
		if count != gitBefore[kind] {
			t.Errorf("%d Git %s requests during the re-assessments, want none", count-gitBefore[kind], kind)
		}
	}
	if got := ticksOf(p, ns, "web"); got != ticksBefore {
		t.Errorf("%d ticks through the phases, want none (only re-assessments)", got-ticksBefore)
	}
}
