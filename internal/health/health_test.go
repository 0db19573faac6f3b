package health

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

func object(t *testing.T, text string) *unstructured.Unstructured {
	t.Helper()
	data, err := yaml.YAMLToJSON([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(data); err != nil { // numbers as int64, as the API server's are decoded
		t.Fatal(err)
	}
	return u
}

func TestOfAssessesEachKindByItsConventions(t *testing.T) {
	for _, tc := range []struct {
		name, object string
		want         Status
		message      string // a part of kstatus's message
	}{
		{"a ConfigMap has no status: Current once applied", `
apiVersion: v1
kind: ConfigMap
metadata: {name: c, generation: 1}`, Current, "ready"},
		{"a Deployment its controller has not seen", `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, generation: 2}
spec: {replicas: 2}
status: {observedGeneration: 1, replicas: 2, availableReplicas: 2, updatedReplicas: 2, readyReplicas: 2}`, InProgress, "generation"},
		{"a Deployment with one of two replicas available", `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, generation: 1}
spec: {replicas: 2}
status:
  observedGeneration: 1
  replicas: 2
  updatedReplicas: 2
  readyReplicas: 1
  availableReplicas: 1
  conditions:
  - {type: Available, status: "False"}
  - {type: Progressing, status: "True", reason: ReplicaSetUpdated}`, InProgress, "1/2"},
		{"a Deployment whose progress deadline passed", `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, generation: 1}
spec: {replicas: 2}
status:
  observedGeneration: 1
  replicas: 2
  updatedReplicas: 2
  conditions:
  - {type: Progressing, status: "False", reason: ProgressDeadlineExceeded}`, Failed, "deadline"},
		{"a Deployment rolled out", `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, generation: 1}
spec: {replicas: 2}
status:
  observedGeneration: 1
  replicas: 2
  updatedReplicas: 2
  readyReplicas: 2
  availableReplicas: 2
  conditions:
  - {type: Available, status: "True"}
  - {type: Progressing, status: "True", reason: NewReplicaSetAvailable}`, Current, "available"},
		{"a Job that failed", `
apiVersion: batch/v1
kind: Job
metadata: {name: j, generation: 1}
spec: {}
status:
  startTime: "2026-12-01T00:00:00Z"
  failed: 1
  conditions:
  - {type: Failed, status: "True", reason: DeadlineExceeded}`, Failed, "Job Failed"},
		{"an object being deleted", `
apiVersion: v1
kind: ConfigMap
metadata: {name: c, deletionTimestamp: "2026-12-01T00:00:00Z"}`, Terminating, ""},
		{"a custom resource with Ready False", `
apiVersion: example.com/v1
kind: Widget
metadata: {name: w, generation: 1}
status:
  observedGeneration: 1
  conditions:
  - {type: Ready, status: "False", reason: Waiting, message: warming up}`, InProgress, "warming up"},
		{"a custom resource with malformed conditions", `
apiVersion: example.com/v1
kind: Widget
metadata: {name: w, generation: 1}
status:
  conditions: "not a list"`, Unknown, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Of(object(t, tc.object))
			if got.Status != tc.want {
				t.Fatalf("status %s (%q), want %s", got.Status, got.Message, tc.want)
			}
			if !strings.Contains(strings.ToLower(got.Message), strings.ToLower(tc.message)) {
				t.Errorf("message %q does not mention %q", got.Message, tc.message)
			}
		})
	}
}

func TestOfCapsTheMessageTheCacheKeeps(t *testing.T) {
	long := strings.Repeat("é", 400) // 800 bytes, two per rune
	got := Of(object(t, `
apiVersion: example.com/v1
kind: Widget
metadata: {name: w, generation: 1}
status:
  observedGeneration: 1
  conditions:
  - {type: Ready, status: "False", reason: Waiting, message: `+long+`}`))
	if got.Status != InProgress || len(got.Message) > maxMessage || !strings.HasSuffix(got.Message, "...") || !utf8.ValidString(got.Message) {
		t.Errorf("status %s, message of %d bytes %q: want InProgress and at most %d valid bytes", got.Status, len(got.Message), got.Message, maxMessage)
	}
}

func ref(kind, name string) plumbv1.ObjectRef {
	return plumbv1.ObjectRef{Group: "apps", Version: "v1", Kind: kind, Namespace: "team", Name: name}
}

func TestSummarizeCountsEveryStatusAndNamesTheFailedFirst(t *testing.T) {
	objects := []Object{
		{Ref: ref("Deployment", "a"), Result: Result{Status: Current}},
		{Ref: ref("Deployment", "b"), Result: Result{Status: InProgress, Message: "Available: 0/2"}},
		{Ref: ref("Deployment", "c"), Result: Result{Status: Failed, Message: "Progress deadline exceeded"}},
		{Ref: ref("Deployment", "d"), Result: Result{Status: NotFound, Message: "gone"}},
		{Ref: ref("Deployment", "e"), Result: Result{Status: Terminating}},
		{Ref: ref("Deployment", "f"), Result: Result{Status: Unknown, Message: strings.Repeat("x", 1000)}},
	}
	got := Summarize(objects)
	want := &plumbv1.HealthStatus{Current: 1, InProgress: 1, Failed: 1, Terminating: 1, NotFound: 1, Unknown: 1,
		Unhealthy: []plumbv1.UnhealthyObject{
			{ObjectRef: ref("Deployment", "c"), Status: "Failed", Message: "Progress deadline exceeded"},
			{ObjectRef: ref("Deployment", "b"), Status: "InProgress", Message: "Available: 0/2"},
			{ObjectRef: ref("Deployment", "d"), Status: "NotFound", Message: "gone"},
			{ObjectRef: ref("Deployment", "e"), Status: "Terminating"},
			{ObjectRef: ref("Deployment", "f"), Status: "Unknown", Message: strings.Repeat("x", 253) + "..."},
		}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("summary (-want +got):\n%s", diff)
	}
}

func TestSummarizeListsAtMostTwentyButCountsAll(t *testing.T) {
	var objects []Object
	for i := range 50 {
		objects = append(objects, Object{Ref: ref("Deployment", strings.Repeat("d", i+1)), Result: Result{Status: InProgress}})
	}
	got := Summarize(objects)
	if got.InProgress != 50 || len(got.Unhealthy) != 20 {
		t.Fatalf("counted %d, listed %d; want 50 and 20", got.InProgress, len(got.Unhealthy))
	}
	_, _, message := Judge(got, time.Unix(0, 0), time.Minute)
	if !strings.Contains(message, "and 30 more") {
		t.Errorf("message %q does not say how many more", message)
	}
}

func TestJudge(t *testing.T) {
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	since := metav1.NewTime(start)
	inProgress := &plumbv1.HealthStatus{Current: 1, InProgress: 1, WaitingSince: &since,
		Unhealthy: []plumbv1.UnhealthyObject{{ObjectRef: ref("Deployment", "web"), Status: "InProgress", Message: "Available: 0/2"}}}
	failed := &plumbv1.HealthStatus{Current: 1, Failed: 1, WaitingSince: &since,
		Unhealthy: []plumbv1.UnhealthyObject{{ObjectRef: ref("Deployment", "web"), Status: "Failed", Message: "Progress deadline exceeded"}}}
	for _, tc := range []struct {
		name     string
		summary  *plumbv1.HealthStatus
		now      time.Time
		want     Verdict
		deadline time.Time
		message  string
	}{
		{"every object Current", &plumbv1.HealthStatus{Current: 3}, start, Healthy, time.Time{}, ""},
		{"in progress within the timeout", inProgress, start.Add(4 * time.Minute), Progressing, start.Add(5 * time.Minute),
			"waiting for 1 of 2 objects to become healthy (until 2026-12-01T12:05:00Z): Deployment.apps/team/web InProgress (Available: 0/2)"},
		{"in progress at the timeout", inProgress, start.Add(5 * time.Minute), CheckFailed, time.Time{},
			"1 of 2 objects not healthy after 5m0s: Deployment.apps/team/web InProgress (Available: 0/2)"},
		{"failed at once", failed, start, CheckFailed, time.Time{},
			"1 of 2 objects failed: Deployment.apps/team/web Failed (Progress deadline exceeded)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, deadline, message := Judge(tc.summary, tc.now, 5*time.Minute)
			if v != tc.want || !deadline.Equal(tc.deadline) || message != tc.message {
				t.Errorf("got %d, %s, %q; want %d, %s, %q", v, deadline, message, tc.want, tc.deadline, tc.message)
			}
		})
	}
}

func TestSinceStartsAWaitOnAChangeOrWhenHealthIsLost(t *testing.T) {
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	later := start.Add(time.Minute)
	since := metav1.NewTime(start)
	if got := Since(nil, &plumbv1.HealthStatus{InProgress: 1}, true, start.Add(10*time.Millisecond)); !got.Time.Equal(start.Add(time.Second)) {
		t.Errorf("a wait begun at 12:00:00.01 began at %s, want 12:00:01 (rounded up to the second)", got.Time)
	}
	healthy := &plumbv1.HealthStatus{Current: 2}
	waiting := &plumbv1.HealthStatus{Current: 1, InProgress: 1, WaitingSince: &since}
	if got := Since(waiting, healthy, true, later); got != nil {
		t.Errorf("healthy: waiting since %v, want unset", got)
	}
	if got := Since(healthy, &plumbv1.HealthStatus{InProgress: 1}, false, later); got == nil || !got.Time.Equal(later) {
		t.Errorf("health lost: waiting since %v, want %s", got, later)
	}
	if got := Since(waiting, &plumbv1.HealthStatus{InProgress: 1}, false, later); got == nil || !got.Time.Equal(start) {
		t.Errorf("still waiting: since %v, want %s (the wait goes on)", got, start)
	}
	if got := Since(waiting, &plumbv1.HealthStatus{InProgress: 1}, true, later); got == nil || !got.Time.Equal(later) {
		t.Errorf("changed by an apply: since %v, want %s (a new wait)", got, later)
	}
}
