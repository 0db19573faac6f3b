package reconcile

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/plumb-dev/plumb/internal/source/git/gittest"
	"github.com/plumb-dev/plumb/queue"
)

// Every line a tick logs, at every level, says which App, which tick,
// which phase and which revision it is about — through an apply, a healed
// drift and a failed read — and none shows the Git password or a Secret's
// value.
func TestEveryLineOfATickNamesAppTickPhaseAndRevision(t *testing.T) {
	ctx := context.Background()
	const secretValue = "s3cret-value-in-git"
	w, repo := newRepo(t, map[string]string{
		"deploy/a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  color: blue\n",
		"deploy/s.yaml": "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\nstringData:\n  token: " + secretValue + "\n",
	})
	app := newApp(t, repo, nil)
	key := client.ObjectKeyFromObject(app)
	h := newHarness(t)
	core, logs := observer.New(zap.DebugLevel)
	h.r.Log = zap.New(core)

	ready(t, h.tick(t, key, queue.WakeTimer))
	c := admin(t)
	for name, change := range map[string]func(client.Object){
		"a": func(o client.Object) { o.(*corev1.ConfigMap).Data["color"] = "red" },
		"s": func(o client.Object) { o.(*corev1.Secret).Data["token"] = []byte("changed-" + secretValue) },
	} {
		var obj client.Object = &corev1.ConfigMap{}
		if name == "s" {
			obj = &corev1.Secret{}
		}
		if err := c.Get(ctx, client.ObjectKey{Namespace: app.Namespace, Name: name}, obj); err != nil {
			t.Fatal(err)
		}
		change(obj)
		if err := c.Update(ctx, obj, client.FieldOwner("kubectl-edit")); err != nil {
			t.Fatal(err)
		}
		waitCached(t, h, obj)
	}
	h.tick(t, key, queue.WakeEvent)
	pushed(t, w, map[string]string{"deploy/a.yaml": "kind: [\n"})
	h.tick(t, key, queue.WakeTimer)

	if logs.Len() < 4 {
		t.Fatalf("%d lines over three ticks, want at least the apply, the heal and the failure", logs.Len())
	}
	phases := map[string]bool{}
	for _, entry := range logs.All() {
		fields := entry.ContextMap()
		for _, want := range []string{"app", "tick", "phase", "revision"} {
			if _, ok := fields[want]; !ok {
				t.Errorf("%q (%s) has no %q: %v", entry.Message, entry.Level, want, fields)
			}
		}
		if fields["app"] != key.String() {
			t.Errorf("%q names App %v, want %s", entry.Message, fields["app"], key)
		}
		phases[fmt.Sprint(fields["phase"])] = true
		line := fmt.Sprint(entry.Message, fields)
		if strings.Contains(line, secretValue) || strings.Contains(line, gittest.Password) {
			t.Errorf("a log line shows a secret: %s", line)
		}
	}
	for _, want := range []string{"apply", "read"} {
		if !phases[want] {
			t.Errorf("no line of the %s phase among %v", want, phases)
		}
	}
}
