package notify

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

// AlertName is the alertname of the alerts plumb posts to Alertmanager.
const AlertName = "PlumbDrift"

// alertKey is one App's alert at one Notification.
type alertKey struct {
	notification types.NamespacedName
	app          types.NamespacedName
}

// openAlert is an alert posted as firing and not yet resolved: it is posted
// again every AlertRefresh, since Alertmanager resolves an alert whose
// endsAt has passed.
type openAlert struct {
	sink   string
	event  Event
	starts time.Time
	// destination is the destination label the alert fired with: part of
	// its identity in Alertmanager, so kept for its refreshes and its
	// resolve even when the App's destination changed meanwhile.
	destination string
}

// amAlert is an alert in Alertmanager's v2 API.
type amAlert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	StartsAt    time.Time         `json:"startsAt"`
	EndsAt      time.Time         `json:"endsAt"`
}

// alertRequest posts a drift event as an alert: firing (valid for three
// refresh periods) when detected, resolved (endsAt now) when it ends.
func (d *Dispatcher) alertRequest(ctx context.Context, n *plumbv1.Notification, base *url.URL, token string, dl *delivery) (*http.Request, error) {
	e := &dl.event
	key := alertKey{notification: types.NamespacedName{Namespace: n.Namespace, Name: n.Name}, app: e.App}
	starts, ends := e.Time, d.opts.Clock.Now().Add(3*d.opts.AlertRefresh)
	destination := e.Destination
	d.mu.Lock()
	open, ok := d.alerts[key]
	if ok {
		starts, destination = open.starts, open.destination
	}
	d.mu.Unlock()
	if dl.refresh && !ok {
		return nil, nil // resolved since the refresh was queued
	}
	if e.Kind == plumbv1.EventDriftResolved {
		ends = e.Time
	}
	labels := map[string]string{"alertname": AlertName, "namespace": e.App.Namespace, "name": e.App.Name, "severity": "warning"}
	if destination != "" {
		labels["destination"] = destination
	}
	alert := amAlert{
		Labels: labels,
		Annotations: map[string]string{
			"summary":     Summary(e),
			"description": strings.TrimPrefix(slackText(e), "*"+slackEscape.Replace(Summary(e))+"*\n"),
			"revision":    e.Revision,
		},
		StartsAt: starts,
		EndsAt:   ends,
	}
	req, err := jsonRequest(ctx, strings.TrimSuffix(base.String(), "/")+"/api/v2/alerts", []amAlert{alert})
	if err == nil && token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return req, err
}

// track remembers the Alertmanager alerts that are firing after a delivery,
// and forgets those resolved.
func (d *Dispatcher) track(n *plumbv1.Notification, dl *delivery) {
	if n.Spec.Type != plumbv1.SinkAlertmanager {
		return
	}
	key := alertKey{notification: types.NamespacedName{Namespace: n.Namespace, Name: n.Name}, app: dl.event.App}
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case dl.event.Kind == plumbv1.EventDriftResolved:
		delete(d.alerts, key)
	case dl.refresh:
		// A repeat changes nothing (and must not reopen a resolved alert).
	case dl.event.Kind == plumbv1.EventDriftDetected:
		if open, ok := d.alerts[key]; ok {
			open.event = dl.event
			return
		}
		d.alerts[key] = &openAlert{sink: string(n.Spec.Type), event: dl.event, starts: dl.event.Time, destination: dl.event.Destination}
	}
}

// pendingFor reports whether key's Notification has a delivery queued for
// key's App; d.mu is held.
func (d *Dispatcher) pendingFor(key alertKey) bool {
	box := d.outboxes[key.notification]
	if box == nil {
		return false
	}
	for _, dl := range box.pending {
		if dl.event.App == key.app {
			return true
		}
	}
	return false
}

// untrack forgets the alert of app at Notification key.
func (d *Dispatcher) untrack(key, app types.NamespacedName) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.alerts, alertKey{notification: key, app: app})
}

// refreshAlerts posts the open alerts again every AlertRefresh, through
// their Notification's queue (so that a resolve queued behind cannot be
// overtaken).
func (d *Dispatcher) refreshAlerts(ctx context.Context) {
	ticker := d.opts.Clock.NewTicker(d.opts.AlertRefresh)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		}
		// Checked and queued under one lock: a resolve queued meanwhile
		// cannot slip in between (a refresh that finds its alert resolved
		// when it is sent sends nothing).
		d.forgetGone(ctx)
		d.mu.Lock()
		var scheduled []types.NamespacedName
		for key, open := range d.alerts {
			if d.pendingFor(key) {
				continue // something for this App at this sink is on its way already
			}
			if _, first := d.enqueueLocked(key.notification, open.sink, &delivery{event: open.event, queued: d.opts.Clock.Now(), refresh: true}); first {
				scheduled = append(scheduled, key.notification)
			}
		}
		d.mu.Unlock()
		for _, key := range scheduled {
			d.queue.Add(key)
		}
	}
}

// forgetGone forgets what is remembered of Notifications that no longer
// exist (their last reported state, their open alerts, their queues), so
// that the Dispatcher's memory shrinks as Notifications are deleted, even
// those that are sent nothing more. It runs at each refresh.
func (d *Dispatcher) forgetGone(ctx context.Context) {
	d.mu.Lock()
	namespaces := map[string]bool{}
	for key := range d.reported {
		namespaces[key.Namespace] = true
	}
	for key := range d.alerts {
		namespaces[key.notification.Namespace] = true
	}
	d.mu.Unlock()
	for namespace := range namespaces {
		listCtx, cancel := context.WithTimeout(ctx, d.opts.RequestTimeout)
		list, err := d.opts.Notifications(listCtx, namespace)
		cancel()
		if err != nil {
			continue // forgotten at a later refresh
		}
		exists := map[string]bool{}
		for i := range list {
			exists[list[i].Name] = true
		}
		d.mu.Lock()
		var gone []types.NamespacedName
		for key := range d.reported {
			if key.Namespace == namespace && !exists[key.Name] {
				gone = append(gone, key)
			}
		}
		for key := range d.alerts {
			if key.notification.Namespace == namespace && !exists[key.notification.Name] {
				gone = append(gone, key.notification)
			}
		}
		d.mu.Unlock()
		for _, key := range gone {
			d.drop(key)
		}
	}
}
