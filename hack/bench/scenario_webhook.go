package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/plumb-dev/plumb/webhook"
)

// webhookChanged is how many objects each push changes (scenario 6).
const webhookChanged = 50

// webhookInterval is the webhook App's fallback interval: long, so that
// only the webhook brings its ticks.
const webhookInterval = 10 * time.Minute

// webhookSpacing is the least time between two pushes' webhooks: the
// figure is the latency of one push's path to the cluster, not the
// throughput of pushes back to back (each costs the controller about
// webhookChanged+3 requests: the applies, the status, an Event, the
// webhook's sync annotation), which on a client-side rate limit (50 a
// second, where the API server does not apply API Priority and Fairness)
// would measure the limit.
const webhookSpacing = 2 * time.Second

// measureWebhook is scenario 6: an App of webhookChanged ConfigMaps, all
// changed by each of pushes commits. Each commit is pushed to the Git
// server, then announced to the controller by a signed GitHub push
// webhook, webhookSpacing after the last; the figure is the time from
// sending the webhook to the watch event of the last changed object's
// apply.
func measureWebhook(ctx context.Context, w *world, ctl *controllerProcess, pushes int, logf func(string, ...any)) ([]float64, error) {
	ns, err := w.newNamespace(ctx, "bench-webhook")
	if err != nil {
		return nil, err
	}
	content := func(push int) map[string]string {
		return configMaps(webhookChanged, payloadBytes, func(int) string { return fmt.Sprintf("push-%d", push) })
	}
	r, hash, err := w.newRepo(content(0))
	if err != nil {
		return nil, err
	}
	if err := w.createApp(ctx, ns, "webhook", r, webhookInterval); err != nil {
		return nil, err
	}
	if err := w.readyAt(ctx, ns, "webhook", hash, 2*time.Minute); err != nil {
		return nil, fmt.Errorf("%w\n%s", err, ctl.tail(20))
	}
	clientset, err := kubernetes.NewForConfig(w.cluster.Config)
	if err != nil {
		return nil, err
	}
	configMaps := clientset.CoreV1().ConfigMaps(ns)
	logf("Pushing %d commits of %d changed objects, each announced by a signed GitHub webhook", pushes, webhookChanged)
	var seconds []float64
	var sent time.Time
	for push := 1; push <= pushes; push++ {
		list, err := configMaps.List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		before := hash
		if hash, err = r.push(content(push)); err != nil {
			return nil, err
		}
		want := fmt.Sprintf("push-%d", push)
		watchCtx, cancel := context.WithTimeout(ctx, time.Minute)
		watcher, err := configMaps.Watch(watchCtx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
		if err != nil {
			cancel()
			return nil, err
		}
		if wait := time.Until(sent.Add(webhookSpacing)); wait > 0 {
			time.Sleep(wait)
		}
		sent = time.Now()
		if err := sendGitHubPush(ctx, ctl.webhookAddr, r, before, hash, push); err != nil {
			watcher.Stop()
			cancel()
			return nil, err
		}
		last, err := lastOfConfigMaps(watcher, webhookChanged, func(cm *corev1.ConfigMap) bool { return cm.Data["value"] == want })
		if err != nil {
			watcher.Stop()
			cancel()
			return nil, fmt.Errorf("push %d: %w\n%s", push, err, ctl.tail(20))
		}
		watcher.Stop()
		cancel()
		seconds = append(seconds, last.Sub(sent).Seconds())
		if err := w.readyAt(ctx, ns, "webhook", hash, time.Minute); err != nil {
			return nil, err // the next push starts from a settled App
		}
	}
	return seconds, nil
}

// sendGitHubPush posts a GitHub push event for commit after (on main,
// following before) of r to the controller's webhook endpoint, signed with
// the bench's secret, and checks that it matched one App.
func sendGitHubPush(ctx context.Context, addr string, r *repo, before, after string, delivery int) error {
	body, err := json.Marshal(map[string]any{
		"ref": "refs/heads/main", "before": before, "after": after,
		"repository": map[string]any{"name": strings.TrimSuffix(r.name, ".git"), "full_name": "bench/" + strings.TrimSuffix(r.name, ".git"),
			"clone_url": r.url, "html_url": r.url},
		"head_commit": map[string]any{"id": after},
	})
	if err != nil {
		return err
	}
	req, err := webhook.NewGitHubPush(ctx, "http://"+addr+"/hooks/github", []byte(webhookSecret), body, fmt.Sprintf("bench-%s-%d", r.name, delivery))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	reply, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode != http.StatusAccepted || !strings.Contains(string(reply), "matched 1 apps") {
		return fmt.Errorf("the webhook answered %s: %s", resp.Status, strings.TrimSpace(string(reply)))
	}
	return nil
}

// webhookResults are scenario 6's rows.
func webhookResults(seconds []float64) []result {
	p50Goal, p50Met := goalAtMost(0.5)
	p99Goal, p99Met := goalAtMost(2)
	note := fmt.Sprintf("%d pushes, each changing all %d ConfigMaps of an App (fallback interval %s), webhooks at least %s apart (latency of one push, not the throughput of pushes back to back): from sending the signed GitHub push webhook (after the git push) to the watch event of the last changed object's apply",
		len(seconds), webhookChanged, webhookInterval, webhookSpacing)
	return []result{
		{Key: "webhook_to_applied_p50_seconds", Plumb: single(percentileOf(seconds, 50)), Goal: p50Goal, Met: p50Met, Note: note},
		{Key: "webhook_to_applied_p99_seconds", Plumb: single(percentileOf(seconds, 99)), Goal: p99Goal, Met: p99Met, Note: note},
	}
}
