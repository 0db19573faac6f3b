package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/source/git/gittest"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// stepTimeout bounds how long the demo waits for one step to converge.
const stepTimeout = 2 * time.Minute

// story is the demo's narrative: each step changes Git or the cluster and
// waits until plumb has converged.
type story struct {
	k8s  client.Client
	git  *gittest.Server
	repo *gittest.Workdir
	n    narrator
	// webhookAddr and webhookSecret reach the controller's push receiver;
	// receiver is where the App's Notification sends, signed with
	// receiverKey.
	webhookAddr, webhookSecret string
	receiver                   *receiver
	receiverKey                string
	// plumbBin is the plumb binary the incident runs, with kubeconfig.
	plumbBin, kubeconfig string
}

func newStory(cluster *testenv.Cluster, git *gittest.Server, repo *gittest.Workdir, n narrator) (*story, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := plumbv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c, err := client.New(cluster.Config, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	return &story{k8s: c, git: git, repo: repo, n: n, kubeconfig: cluster.KubeconfigPath}, nil
}

func (s *story) tell(ctx context.Context, first string) error {
	if err := s.createNotification(ctx); err != nil {
		return err
	}
	s.n.say("Created Notification default/drift: drift events, signed, to a local receiver at %s", s.receiver.URL)
	if err := s.createApp(ctx); err != nil {
		return err
	}
	s.n.say("Created App default/shop: %s, branch main, path deploy/", s.git.HTTPURL("shop.git"))

	start := time.Now()
	if err := s.waitReady(ctx, first); err != nil {
		return err
	}
	if err := s.waitReplicas(ctx, 2); err != nil {
		return err
	}
	s.n.say("Applied R1 (%s): Namespace, Deployment, Service and two ConfigMaps; Ready in %s, once Deployment shop/web was Available with 2/2 replicas (pods run on kwok's fake node): %s",
		onMain(first), since(start), s.healthLine(ctx))

	second, err := s.push("Scale to 3 and turn green", map[string]string{
		"deploy/configmap.yaml":  strings.Replace(s.read("deploy/configmap.yaml"), "color: blue", "color: green", 1),
		"deploy/deployment.yaml": strings.Replace(s.read("deploy/deployment.yaml"), "replicas: 2", "replicas: 3", 1),
	})
	if err != nil {
		return err
	}
	start = time.Now()
	if err := sendPush(ctx, s.webhookAddr, s.webhookSecret, s.git.HTTPURL("shop.git"), second); err != nil {
		return err
	}
	s.n.say("Pushed R2 (%s): replicas 2→3, color blue→green; delivered a signed GitHub push webhook", onMain(second))
	if err := s.waitReady(ctx, second); err != nil {
		return err
	}
	if err := s.waitReplicas(ctx, 3); err != nil {
		return err
	}
	s.n.say("Converged to R2 in %s: 3/3 replicas available, settings.color=green", since(start))

	settings := &corev1.ConfigMap{}
	if err := s.k8s.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "settings"}, settings); err != nil {
		return err
	}
	settings.Data["color"] = "hand-edited"
	if err := s.k8s.Update(ctx, settings, client.FieldOwner("kubectl-edit")); err != nil {
		return err
	}
	start = time.Now()
	s.n.say("Changed ConfigMap shop/settings by hand, as kubectl edit does (color=hand-edited): drift")
	err = s.poll(ctx, "the drift to be healed", func() (bool, error) {
		cm := &corev1.ConfigMap{}
		if err := s.k8s.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "settings"}, cm); err != nil {
			return false, nil
		}
		return cm.Data["color"] == "green", nil
	})
	if err != nil {
		return err
	}
	s.n.say("Healed the drift in %s (the informer saw the change; the App's interval is 3m)", since(start))
	detected, err := s.receiver.next(ctx, string(plumbv1.EventDriftDetected))
	if err != nil {
		return err
	}
	s.n.say("A DriftDetected notification reached the receiver, signature valid: %s", describeNotified(detected))
	if _, err := s.receiver.next(ctx, string(plumbv1.EventDriftResolved)); err != nil {
		return err
	}
	s.n.say("Then DriftResolved: the objects match Git again")

	third, err := s.push("Remove the banner", map[string]string{"deploy/banner.yaml": ""})
	if err != nil {
		return err
	}
	start = time.Now()
	if err := sendPush(ctx, s.webhookAddr, s.webhookSecret, s.git.HTTPURL("shop.git"), third); err != nil {
		return err
	}
	s.n.say("Pushed R3 (%s): deleted deploy/banner.yaml; delivered a signed GitHub push webhook", onMain(third))
	if err := s.waitReady(ctx, third); err != nil {
		return err
	}
	err = s.poll(ctx, "the banner to be pruned", func() (bool, error) {
		err := s.k8s.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "banner"}, &corev1.ConfigMap{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		return err
	}
	s.n.say("Pruned ConfigMap shop/banner in %s; the App is Ready at R3", since(start))

	healthy := s.read("deploy/deployment.yaml")
	fourth, err := s.push("Roll out a release that never becomes available", map[string]string{
		"deploy/deployment.yaml": strings.Replace(healthy, "requests: {cpu: 50m,", `requests: {cpu: "1000",`, 1),
	})
	if err != nil {
		return err
	}
	start = time.Now()
	if err := sendPush(ctx, s.webhookAddr, s.webhookSecret, s.git.HTTPURL("shop.git"), fourth); err != nil {
		return err
	}
	s.n.say("Pushed R4 (%s): a rollout whose pods ask for 1000 CPUs; they stay Pending, as pods whose image does not exist never become ready (kwok pulls no images)", onMain(fourth))
	failed, err := s.waitHealthCheckFailed(ctx, fourth)
	if err != nil {
		return err
	}
	s.n.say("Ready=False HealthCheckFailed %s after the push (healthTimeout 20s): %s", since(start), failed)

	fifth, err := s.push("Roll back", map[string]string{"deploy/deployment.yaml": healthy})
	if err != nil {
		return err
	}
	start = time.Now()
	if err := sendPush(ctx, s.webhookAddr, s.webhookSecret, s.git.HTTPURL("shop.git"), fifth); err != nil {
		return err
	}
	s.n.say("Pushed R5 (%s): rolled back to R3's Deployment", onMain(fifth))
	if err := s.waitReady(ctx, fifth); err != nil {
		return err
	}
	s.n.say("Ready again at R5 in %s: %s", since(start), s.healthLine(ctx))
	if err := s.incident(ctx); err != nil {
		return err
	}
	return s.checkNoUnexpectedWarnings(ctx)
}

// healthLine is the App's Healthy condition in words.
func (s *story) healthLine(ctx context.Context) string {
	app := &plumbv1.App{}
	if err := s.k8s.Get(ctx, client.ObjectKey{Namespace: "default", Name: "shop"}, app); err != nil {
		return err.Error()
	}
	cond := apimeta.FindStatusCondition(app.Status.Conditions, plumbv1.ConditionHealthy)
	if cond == nil {
		return "no Healthy condition"
	}
	return fmt.Sprintf("Healthy=%s (%s)", cond.Status, cond.Message)
}

// waitHealthCheckFailed waits until the App, at the commit hash, is
// Ready=False with reason HealthCheckFailed, and returns its message.
func (s *story) waitHealthCheckFailed(ctx context.Context, hash string) (string, error) {
	message := ""
	err := s.poll(ctx, "the App to fail its health check at "+hash, func() (bool, error) {
		app := &plumbv1.App{}
		if err := s.k8s.Get(ctx, client.ObjectKey{Namespace: "default", Name: "shop"}, app); err != nil {
			return false, nil
		}
		cond := apimeta.FindStatusCondition(app.Status.Conditions, plumbv1.ConditionReady)
		if cond == nil || !strings.HasSuffix(app.Status.LastAppliedRevision, hash) {
			return false, nil
		}
		message = cond.Message
		return cond.Status == metav1.ConditionFalse && cond.Reason == plumbv1.ReasonHealthCheckFailed, nil
	})
	return message, err
}

// checkNoUnexpectedWarnings fails the demo if plumb recorded a Warning on
// the App other than the drift and the failed rollout the story caused:
// every step should have converged at the first try.
func (s *story) checkNoUnexpectedWarnings(ctx context.Context) error {
	events := &corev1.EventList{}
	if err := s.k8s.List(ctx, events, client.InNamespace("default")); err != nil {
		return err
	}
	var unexpected []string
	for _, e := range events.Items {
		if e.InvolvedObject.Kind == "App" && e.Type == corev1.EventTypeWarning && e.Reason != plumbv1.ReasonDriftDetected && e.Reason != plumbv1.ReasonHealthCheckFailed {
			unexpected = append(unexpected, e.Reason+": "+e.Message)
		}
	}
	if len(unexpected) > 0 {
		return fmt.Errorf("plumb reported failures during the demo: %s", strings.Join(unexpected, "; "))
	}
	return nil
}

func since(t time.Time) string { return time.Since(t).Round(10 * time.Millisecond).String() }

// read returns a file of the working tree.
func (s *story) read(name string) string {
	out, err := s.repo.Git("show", "HEAD:"+name)
	if err != nil {
		return ""
	}
	return out + "\n"
}

func (s *story) push(message string, files map[string]string) (string, error) {
	hash, err := s.repo.Commit(message, files)
	if err != nil {
		return "", err
	}
	return hash, s.repo.Push("main")
}

func (s *story) createApp(ctx context.Context) error {
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "shop-git"},
		StringData: map[string]string{"username": gittest.Username, "password": gittest.Password},
	}
	if err := s.k8s.Create(ctx, secret); err != nil {
		return err
	}
	return s.k8s.Create(ctx, &plumbv1.App{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "shop"},
		Spec: plumbv1.AppSpec{Source: plumbv1.Source{
			URL: s.git.HTTPURL("shop.git"), Ref: plumbv1.GitRef{Branch: "main"}, Path: "deploy",
			SecretRef: &plumbv1.LocalObjectReference{Name: secret.Name},
		}, HealthTimeout: &metav1.Duration{Duration: 20 * time.Second}}, // the default, 5m, is long for a demo
	})
}

// createNotification sends the drift events of the namespace's Apps to the
// demo's receiver, signed with a key from a Secret.
func (s *story) createNotification(ctx context.Context) error {
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "drift-receiver"},
		StringData: map[string]string{"hmacKey": s.receiverKey},
	}
	if err := s.k8s.Create(ctx, secret); err != nil {
		return err
	}
	return s.k8s.Create(ctx, &plumbv1.Notification{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "drift"},
		Spec: plumbv1.NotificationSpec{Type: plumbv1.SinkWebhook, Address: s.receiver.URL,
			SecretRef: &plumbv1.LocalObjectReference{Name: secret.Name}},
	})
}

// describeNotified says what a drift notification names: each field, its
// values, and who changed it.
func describeNotified(e receivedEvent) string {
	var parts []string
	for _, o := range e.Objects {
		for _, f := range o.Fields {
			who := f.Manager
			if f.Operation != "" {
				who += " (" + f.Operation
				if f.Time != nil {
					who += " at " + f.Time.UTC().Format(time.TimeOnly)
				}
				who += ")"
			}
			parts = append(parts, fmt.Sprintf("%s %s/%s %s %s→%s by %s", o.Kind, o.Namespace, o.Name, f.Path, f.Before, f.After, who))
		}
	}
	healed := "left in place"
	if e.Healed {
		healed = "put back by plumb"
	}
	return strings.Join(parts, "; ") + "; " + healed
}

// waitReady waits until the App is Ready at the commit hash.
func (s *story) waitReady(ctx context.Context, hash string) error {
	last := ""
	err := s.poll(ctx, "the App to be Ready at "+hash, func() (bool, error) {
		app := &plumbv1.App{}
		if err := s.k8s.Get(ctx, client.ObjectKey{Namespace: "default", Name: "shop"}, app); err != nil {
			return false, nil
		}
		cond := apimeta.FindStatusCondition(app.Status.Conditions, plumbv1.ConditionReady)
		if cond == nil {
			return false, nil
		}
		last = fmt.Sprintf("Ready=%s %s: %s", cond.Status, cond.Reason, cond.Message)
		return cond.Status == metav1.ConditionTrue && strings.HasSuffix(app.Status.LastAppliedRevision, hash), nil
	})
	if err != nil && last != "" {
		return fmt.Errorf("%w (last: %s)", err, last)
	}
	return err
}

func (s *story) waitReplicas(ctx context.Context, want int32) error {
	return s.poll(ctx, fmt.Sprintf("%d available replicas", want), func() (bool, error) {
		d := &appsv1.Deployment{}
		if err := s.k8s.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "web"}, d); err != nil {
			return false, nil
		}
		return d.Status.AvailableReplicas == want && d.Status.UpdatedReplicas == want && d.Status.Replicas == want, nil
	})
}

func (s *story) poll(ctx context.Context, what string, cond func() (bool, error)) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, stepTimeout, true, func(context.Context) (bool, error) { return cond() })
	if err != nil {
		return fmt.Errorf("waiting for %s: %w", what, err)
	}
	return nil
}
