package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

// syncAndWait asks for a tick and waits until a tick has handled it.
func syncAndWait(t *testing.T, ns, name string) {
	t.Helper()
	requestSync(t, ns, name)
	want := getApp(t, ns, name).Annotations[plumbv1.AnnotationSyncRequestedAt]
	eventually(t, 30*time.Second, "the sync request to be handled", func() (bool, string) {
		got := getApp(t, ns, name).Status.LastHandledSyncRequest
		return got == want, "handled " + got
	})
}

// appEvents lists the Events about an App by reason.
func appEvents(t *testing.T, ns, name string) map[string][]corev1.Event {
	t.Helper()
	list := &corev1.EventList{}
	if err := k8s.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	out := map[string][]corev1.Event{}
	for _, e := range list.Items {
		if e.InvolvedObject.Kind == "App" && e.InvolvedObject.Name == name {
			out[e.Reason] = append(out[e.Reason], e)
		}
	}
	return out
}

func TestEventsSayWhatChangedOrFailedButNotEveryTick(t *testing.T) {
	setUp(t)
	ns := newNamespace(t)
	w, url, first := gitRepo(t, map[string]string{"deploy/config.yaml": configMapYAML("settings", "blue")})
	createApp(t, ns, "events", url, nil)
	readyAt(t, ns, "events", first)
	var applied []corev1.Event
	eventually(t, 30*time.Second, "an Applied Event", func() (bool, string) {
		applied = appEvents(t, ns, "events")["Applied"]
		return len(applied) == 1, "no Applied Event yet"
	})
	if e := applied[0]; e.Type != corev1.EventTypeNormal || !strings.Contains(e.Message, "ConfigMap/"+ns+"/settings created") {
		t.Errorf("Applied Event = %s %q", e.Type, e.Message)
	}

	// Ticks that change nothing record nothing.
	syncAndWait(t, ns, "events")
	syncAndWait(t, ns, "events")
	if got := appEvents(t, ns, "events")["Applied"]; len(got) != 1 || got[0].Count > 1 {
		t.Errorf("unchanged ticks recorded Applied Events: %+v", got)
	}

	// A failure is recorded once, however many ticks see it.
	commit(t, w, map[string]string{"deploy/config.yaml": "kind: [\n"})
	syncAndWait(t, ns, "events")
	syncAndWait(t, ns, "events")
	failed := appEvents(t, ns, "events")[plumbv1.ReasonReadFailed]
	if len(failed) != 1 || failed[0].Type != corev1.EventTypeWarning || failed[0].Count != 1 {
		t.Fatalf("ReadFailed Events after two failing ticks: %+v", failed)
	}
	if !strings.Contains(failed[0].Message, "read phase failed") || !strings.Contains(failed[0].Message, "deploy/config.yaml") {
		t.Errorf("ReadFailed Event message %q does not name the phase and file", failed[0].Message)
	}
}

func TestASuspendedAppIsLeftAlone(t *testing.T) {
	setUp(t)
	ns := newNamespace(t)
	w, url, first := gitRepo(t, map[string]string{"deploy/config.yaml": configMapYAML("settings", "blue")})
	createApp(t, ns, "paused", url, nil)
	readyAt(t, ns, "paused", first)

	app := getApp(t, ns, "paused")
	patch := client.MergeFrom(app.DeepCopy())
	app.Spec.Suspend = true
	if err := k8s.Patch(context.Background(), app, patch); err != nil {
		t.Fatal(err)
	}
	second := commit(t, w, map[string]string{"deploy/config.yaml": configMapYAML("settings", "red")})
	syncAndWait(t, ns, "paused")
	if cm, _ := getConfigMap(t, ns, "settings"); cm.Data["color"] != "blue" {
		t.Errorf("a suspended App was applied: color %q", cm.Data["color"])
	}
	if cond := findCondition(getApp(t, ns, "paused"), plumbv1.ConditionReconciling); cond.Reason != plumbv1.ReasonSuspended {
		t.Errorf("Reconciling condition = %+v, want reason Suspended", cond)
	}

	app = getApp(t, ns, "paused")
	patch = client.MergeFrom(app.DeepCopy())
	app.Spec.Suspend = false
	if err := k8s.Patch(context.Background(), app, patch); err != nil {
		t.Fatal(err)
	}
	readyAt(t, ns, "paused", second)
}
