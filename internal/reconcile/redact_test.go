package reconcile

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/queue"
)

// An admission policy whose message quotes a Secret's value refuses a
// Secret of Git (in the Diff phase's dry-run) and a Secret hook (when the
// ordered sync creates it): the App's conditions, status.sync and the
// tick's error say the policy refused, and hold no value of the Secret.
func TestAPolicysMessageQuotingASecretIsRedacted(t *testing.T) {
	ctx := context.Background()
	c := admin(t)
	const value = "hunter2-in-git"
	selector := fmt.Sprintf("weak-%d", time.Now().UnixNano())
	policy := &admissionv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: selector}, Spec: admissionv1.ValidatingAdmissionPolicySpec{
		MatchConstraints: &admissionv1.MatchResources{
			ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"policy": selector}},
			ResourceRules: []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
				Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
				Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"secrets"}},
			}}},
		},
		Validations: []admissionv1.Validation{{Expression: "false", MessageExpression: "'password ' + string(object.data['password']) + ' is weak'"}},
	}}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: selector}, Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
		PolicyName: selector, ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}}}
	for _, obj := range []client.Object{policy, binding} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Delete(context.Background(), obj) })
	}
	secret := func(name, annotations string) string {
		return "apiVersion: v1\nkind: Secret\nmetadata:\n  name: " + name + "\n  labels:\n    policy: " + selector + "\n" + annotations +
			"data:\n  password: " + base64.StdEncoding.EncodeToString([]byte(value)) + "\n"
	}
	// The policy is in force once the API server refuses a dry-run.
	probe := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "probe", Labels: map[string]string{"policy": selector}},
		Data: map[string][]byte{"password": []byte("x")}}
	eventually(t, func() bool { return c.Create(ctx, probe.DeepCopy(), client.DryRunAll) != nil })

	noValue := func(t *testing.T, where, text string) {
		t.Helper()
		if !strings.Contains(text, "is weak") {
			t.Errorf("%s does not say the policy refused: %q", where, text)
		}
		for _, form := range []string{value, base64.StdEncoding.EncodeToString([]byte(value))} {
			if strings.Contains(text, form) {
				t.Errorf("%s holds the Secret's value: %q", where, text)
			}
		}
	}
	h := newHarness(t)
	// noValueInEvents fails if an Event recorded holds the value.
	noValueInEvents := func(t *testing.T) {
		t.Helper()
		events := h.recorded()
		said := false
		for _, e := range events {
			said = said || strings.Contains(e, "is weak")
			for _, form := range []string{value, base64.StdEncoding.EncodeToString([]byte(value))} {
				if strings.Contains(e, form) {
					t.Errorf("an Event holds the Secret's value: %q", e)
				}
			}
		}
		if !said {
			t.Errorf("no Event says the policy refused: %q", events)
		}
	}

	t.Run("a Secret of Git", func(t *testing.T) {
		_, repo := newRepo(t, map[string]string{"deploy/secret.yaml": secret("db", "")})
		app := newApp(t, repo, noWait)
		key := client.ObjectKeyFromObject(app)
		var err error
		eventually(t, func() bool { // once the App cache has the App
			_, err = h.r.Tick(ctx, key, queue.WakeTimer)
			return err != nil
		})
		noValue(t, "the tick's error", err.Error())
		got := &plumbv1.App{}
		if err := c.Get(ctx, key, got); err != nil {
			t.Fatal(err)
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == plumbv1.ConditionReady {
				noValue(t, "Ready", cond.Message)
			}
		}
		for _, p := range []plumbv1.PhaseStatus{got.Status.Phases.Read, got.Status.Phases.Observe, got.Status.Phases.Diff, got.Status.Phases.Apply} {
			if p.LastError != "" {
				noValue(t, "a phase's last error", p.LastError)
			}
		}
		noValueInEvents(t)
	})

	t.Run("a Secret hook", func(t *testing.T) {
		_, repo := newRepo(t, map[string]string{
			"deploy/app.yaml":  "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n",
			"deploy/hook.yaml": secret("seed", "  annotations:\n    argocd.argoproj.io/hook: PreSync\n"),
		})
		app := newApp(t, repo, noWait)
		key := client.ObjectKeyFromObject(app)
		var got *plumbv1.App
		eventually(t, func() bool {
			got = h.tick(t, key, queue.WakeTimer)
			return got.Status.Sync != nil
		})
		if got.Status.Sync == nil || got.Status.Sync.Phase != plumbv1.SyncPhaseFailed || len(got.Status.Sync.Hooks) != 1 {
			t.Fatalf("status.sync = %+v, want Failed with the refused hook", got.Status.Sync)
		}
		noValue(t, "status.sync.failure", got.Status.Sync.Failure)
		noValue(t, "the hook's message", got.Status.Sync.Hooks[0].Message)
		noValue(t, "Ready", apimeta.FindStatusCondition(got.Status.Conditions, plumbv1.ConditionReady).Message)
		noValueInEvents(t)
	})
}
