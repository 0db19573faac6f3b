package notify

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/egress"
)

// counts is a Recorder that counts in memory.
type counts struct {
	mu      sync.Mutex
	results map[string]int // sink/result
	retries map[string]int
}

func (c *counts) ObserveNotification(sink, result string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.results[sink+"/"+result]++
}

func (c *counts) ObserveNotificationAttemptFailure(sink string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.retries[sink]++
}

func (c *counts) get(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.results[key]
}

// receiver is a test HTTP sink that records what it gets.
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	attempts int
	requests []recorded
	answer   func(n int) int // the status code for the nth request (from 0)
	hold     chan struct{}   // when set, each request waits for it to close
}

type recorded struct {
	path   string
	header http.Header
	body   []byte
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{answer: func(int) int { return http.StatusOK }}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		n := r.attempts
		r.attempts++
		hold := r.hold
		code := r.answer(n)
		r.mu.Unlock()
		if hold != nil {
			<-hold
		}
		r.mu.Lock()
		if code < 300 {
			r.requests = append(r.requests, recorded{path: req.URL.EscapedPath(), header: req.Header.Clone(), body: body})
		}
		r.mu.Unlock()
		w.WriteHeader(code)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) got() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recorded(nil), r.requests...)
}

// waitFor polls cond until it holds, failing after a deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 20*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// fixture runs a Dispatcher over a fixed set of Notifications and Secrets.
type fixture struct {
	d       *Dispatcher
	metrics *counts
	logs    *observer.ObservedLogs
	mu      sync.Mutex
	list    []plumbv1.Notification
	secrets map[string]map[string][]byte
	types   map[string]corev1.SecretType
}

func newFixture(t *testing.T, opts Options, notifications ...plumbv1.Notification) *fixture {
	f := &fixture{list: notifications, secrets: map[string]map[string][]byte{}, types: map[string]corev1.SecretType{},
		metrics: &counts{results: map[string]int{}, retries: map[string]int{}}}
	core, logs := observer.New(zap.DebugLevel)
	f.logs = logs
	opts.Notifications = func(_ context.Context, ns string) ([]plumbv1.Notification, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		var out []plumbv1.Notification
		for _, n := range f.list {
			if n.Namespace == ns {
				out = append(out, *n.DeepCopy())
			}
		}
		return out, nil
	}
	opts.Secrets = func(_ context.Context, key types.NamespacedName) (*corev1.Secret, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		s, ok := f.secrets[key.String()]
		if !ok {
			return nil, fmt.Errorf("secret %s not found", key)
		}
		return &corev1.Secret{Type: f.types[key.String()], Data: s}, nil
	}
	opts.Metrics = f.metrics
	opts.Log = zap.New(core)
	if opts.BaseBackoff == 0 {
		opts.BaseBackoff, opts.MaxBackoff = time.Millisecond, 20*time.Millisecond
	}
	if opts.Client == nil {
		opts.Client = NewClient(nil) // test sinks listen on loopback
	}
	f.d = New(opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = f.d.Start(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return f
}

func notification(name string, sink plumbv1.SinkType, address, secret string) plumbv1.Notification {
	n := plumbv1.Notification{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name},
		Spec: plumbv1.NotificationSpec{Type: sink, Address: address}}
	if secret != "" {
		n.Spec.SecretRef = &plumbv1.LocalObjectReference{Name: secret}
	}
	return n
}

var changedAt = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func driftEvent(healed bool) Event {
	return Event{
		Kind: plumbv1.EventDriftDetected, App: types.NamespacedName{Namespace: "team", Name: "web"},
		Source: "https://git.example.com/team/web.git", Revision: "main@sha1:" + strings.Repeat("a", 40), Commit: strings.Repeat("a", 40),
		Time: changedAt.Add(time.Second), Count: 1, Healed: healed,
		Objects: []DriftedObject{{APIVersion: "v1", Kind: "ConfigMap", Namespace: "team", Name: "settings",
			Fields: []FieldChange{{Path: ".data.color", Before: "blue", After: "red", Manager: "kubectl-edit", Operation: "Update", Time: &changedAt}}}},
	}
}

func TestAWebhookCarriesTheDriftSignedWithTheSecretsKey(t *testing.T) {
	r := newReceiver(t)
	f := newFixture(t, Options{}, notification("hook", plumbv1.SinkWebhook, r.URL+"/plumb", "hook-secret"))
	f.secrets["team/hook-secret"] = map[string][]byte{"hmacKey": []byte("s3cret")}
	f.d.Notify(driftEvent(true))
	waitFor(t, "the webhook to be delivered", func() bool { return f.metrics.get("webhook/delivered") == 1 })
	if len(r.got()) != 1 {
		t.Fatalf("%d requests for one event", len(r.got()))
	}
	got := r.got()[0]
	mac := hmac.New(sha256.New, []byte("s3cret"))
	mac.Write(got.body)
	if want := "sha256=" + hex.EncodeToString(mac.Sum(nil)); got.header.Get(SignatureHeader) != want {
		t.Errorf("signature %q, want %q", got.header.Get(SignatureHeader), want)
	}
	if got.header.Get(EventHeader) != "DriftDetected" || got.path != "/plumb" {
		t.Errorf("event header %q, path %q", got.header.Get(EventHeader), got.path)
	}
	var payload struct {
		Kind             string `json:"kind"`
		App              struct{ Namespace, Name string }
		Revision, Commit string
		Healed           bool
		Objects          []DriftedObject
	}
	if err := json.Unmarshal(got.body, &payload); err != nil {
		t.Fatal(err)
	}
	if payload.Kind != "DriftDetected" || payload.App.Namespace != "team" || payload.App.Name != "web" || !payload.Healed ||
		payload.Commit != strings.Repeat("a", 40) || len(payload.Objects) != 1 {
		t.Fatalf("payload %s", got.body)
	}
	field := payload.Objects[0].Fields[0]
	if field.Path != ".data.color" || field.Manager != "kubectl-edit" || field.Operation != "Update" || field.Time == nil || !field.Time.Equal(changedAt) {
		t.Errorf("field %+v", field)
	}
}

func TestFailedDeliveriesAreRetriedInOrderAndNoneIsLost(t *testing.T) {
	r := newReceiver(t)
	r.answer = func(n int) int {
		if n < 4 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	}
	var reportsMu sync.Mutex
	var reports []string
	f := newFixture(t, Options{Report: func(key types.NamespacedName, delivered bool, message string) {
		reportsMu.Lock()
		defer reportsMu.Unlock()
		reports = append(reports, fmt.Sprintf("%s %v %s", key.Name, delivered, message))
	}}, notification("hook", plumbv1.SinkWebhook, r.URL, ""))
	for i := range 5 {
		e := driftEvent(false)
		e.Message = fmt.Sprint(i)
		f.d.Notify(e)
	}
	waitFor(t, "five deliveries", func() bool { return f.metrics.get("webhook/delivered") == 5 })
	for i, req := range r.got() {
		var p struct{ Message string }
		_ = json.Unmarshal(req.body, &p)
		if p.Message != fmt.Sprint(i) {
			t.Errorf("delivery %d carried event %q: out of order", i, p.Message)
		}
	}
	if n := len(r.got()); n != 5 {
		t.Errorf("%d requests answered 200, want 5", n)
	}
	if f.metrics.retries["webhook"] != 4 {
		t.Errorf("%d failed attempts counted, want 4", f.metrics.retries["webhook"])
	}
	// One warning for the run of failures, one line when it recovers.
	if n := f.logs.FilterMessageSnippet("Could not deliver").Len(); n != 1 {
		t.Errorf("%d failure lines for one run of failures, want 1", n)
	}
	if n := f.logs.FilterMessageSnippet("Delivering notifications again").Len(); n != 1 {
		t.Errorf("%d recovery lines, want 1", n)
	}
	// The Notification's status is told of the change twice, not at each attempt.
	reportsMu.Lock()
	defer reportsMu.Unlock()
	if want := []string{"hook false the webhook sink answered 503", "hook true "}; !slices.Equal(reports, want) {
		t.Errorf("reports %q, want %q", reports, want)
	}
}

func TestASlowSinkHoldsBackOnlyItselfAndNotifyNeverBlocks(t *testing.T) {
	slow, fast := newReceiver(t), newReceiver(t)
	slow.hold = make(chan struct{})
	f := newFixture(t, Options{PerNotification: 3, Intake: 10},
		notification("slow", plumbv1.SinkWebhook, slow.URL, ""), notification("fast", plumbv1.SinkWebhook, fast.URL, ""))
	for i := range 3 {
		e := driftEvent(false)
		e.Message = fmt.Sprint("promised-", i)
		f.d.Notify(e)
	}
	waitFor(t, "the fast sink to get every event while the slow one hangs", func() bool { return len(fast.got()) == 3 })
	// The slow sink's queue is full; thousands more events cost the caller
	// nothing and are counted as dropped, not queued without bound.
	for range 5000 {
		f.d.Notify(driftEvent(false))
	}
	waitFor(t, "drops to be counted", func() bool { return f.metrics.get("webhook/dropped")+f.metrics.get("intake/dropped") > 0 })
	close(slow.hold)
	waitFor(t, "the slow sink to get the events it had queued", func() bool { return len(slow.got()) >= 3 })
	for i, req := range slow.got()[:3] {
		var p struct{ Message string }
		_ = json.Unmarshal(req.body, &p)
		if p.Message != fmt.Sprint("promised-", i) {
			t.Errorf("the slow sink's delivery %d carried %q, want the queued event promised-%d", i, p.Message, i)
		}
	}
	f.d.mu.Lock()
	queued := 0
	for _, box := range f.d.outboxes {
		queued += len(box.pending)
	}
	f.d.mu.Unlock()
	if queued > 2*3 {
		t.Errorf("%d events queued, more than the two queues' bound of 3 each", queued)
	}
}

func TestARefusalIsNotRetried(t *testing.T) {
	r := newReceiver(t)
	r.answer = func(int) int { return http.StatusBadRequest }
	f := newFixture(t, Options{}, notification("hook", plumbv1.SinkWebhook, r.URL, ""))
	f.d.Notify(driftEvent(false))
	waitFor(t, "the refusal to be counted", func() bool { return f.metrics.get("webhook/failed") == 1 })
	if f.metrics.retries["webhook"] != 1 {
		t.Errorf("%d attempts for a 400, want 1", f.metrics.retries["webhook"])
	}
}

func TestASinkAddressFromTheSecretNeverReachesALogLine(t *testing.T) {
	// Nothing listens on port 1: every attempt fails, and is logged.
	f := newFixture(t, Options{MaxAge: 50 * time.Millisecond}, notification("chat", plumbv1.SinkSlack, "", "slack"))
	f.secrets["team/slack"] = map[string][]byte{"address": []byte("http://127.0.0.1:1/services/T000/B000/TOPSECRET")}
	f.d.Notify(driftEvent(false))
	waitFor(t, "the delivery to be given up", func() bool { return f.metrics.get("slack/failed") == 1 })
	if f.logs.Len() == 0 {
		t.Fatal("no failure was logged")
	}
	for _, entry := range f.logs.All() {
		line := fmt.Sprint(entry.Message, entry.ContextMap())
		if strings.Contains(line, "TOPSECRET") || strings.Contains(line, "/services/") {
			t.Errorf("a log line shows the secret address: %s", line)
		}
	}
}

func TestBlockedAddressesAreRefusedAtTheDial(t *testing.T) {
	r := newReceiver(t)
	client := NewClient([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")})
	resp, err := client.Get(r.URL)
	if err == nil {
		resp.Body.Close()
		t.Fatal("a request to a blocked range went through")
	}
	if !errors.Is(err, egress.ErrBlocked) {
		t.Errorf("err = %v, want the blocked-range error", err)
	}
	if len(r.got()) != 0 {
		t.Error("the blocked sink received a request")
	}
	// The defaults stop the metadata address and loopback.
	for _, target := range []string{"http://169.254.169.254/latest/meta-data/", r.URL} {
		if _, err := NewClient(egress.DefaultBlockedPrefixes()).Get(target); !errors.Is(err, egress.ErrBlocked) {
			t.Errorf("%s: err = %v, want the blocked-range error", target, err)
		}
	}
}

func TestCommitStatusesSpeakEachHostsAPI(t *testing.T) {
	r := newReceiver(t)
	f := newFixture(t, Options{},
		notification("gh", plumbv1.SinkGitHub, r.URL, "token"),
		notification("gl", plumbv1.SinkGitLab, r.URL+"/", "token"),
		notification("gt", plumbv1.SinkGitea, r.URL, "token"))
	f.secrets["team/token"] = map[string][]byte{"token": []byte("t0ken")}
	sha := strings.Repeat("b", 40)
	f.d.Notify(Event{Kind: plumbv1.EventRevisionFailed, App: types.NamespacedName{Namespace: "team", Name: "web"},
		Source: "https://git.example.com/group/sub/web.git", Revision: "main@sha1:" + sha, Commit: sha,
		Phase: "read", Message: "the read phase failed: InvalidManifest"})
	f.d.Notify(driftEvent(false)) // commit statuses take no drift events
	waitFor(t, "three statuses", func() bool {
		return f.metrics.get("github/delivered")+f.metrics.get("gitlab/delivered")+f.metrics.get("gitea/delivered") == 3
	})
	byPath := map[string]recorded{}
	for _, req := range r.got() {
		byPath[req.path] = req
	}
	for path, want := range map[string]struct{ auth, authValue, state, contextKey string }{
		"/repos/group/sub/web/statuses/" + sha:               {"Authorization", "Bearer t0ken", "failure", "context"},
		"/api/v4/projects/group%2Fsub%2Fweb/statuses/" + sha: {"PRIVATE-TOKEN", "t0ken", "failed", "name"},
		"/api/v1/repos/group/sub/web/statuses/" + sha:        {"Authorization", "token t0ken", "failure", "context"},
	} {
		req, ok := byPath[path]
		if !ok {
			t.Errorf("no request to %s; got %v", path, byPath)
			continue
		}
		var body map[string]string
		_ = json.Unmarshal(req.body, &body)
		if req.header.Get(want.auth) != want.authValue || body["state"] != want.state || body[want.contextKey] != "plumb/team/web" ||
			!strings.Contains(body["description"], "read phase") {
			t.Errorf("%s: %s=%q body %v", path, want.auth, req.header.Get(want.auth), body)
		}
	}
	if n := len(r.got()); n != 3 {
		t.Errorf("%d requests, want the 3 statuses (no drift event reaches a commit status sink)", n)
	}
}

func TestNotificationsPickEventsAndApps(t *testing.T) {
	selected := notification("sel", plumbv1.SinkWebhook, "http://x", "")
	selected.Spec.AppSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "web"}}
	revisions := notification("rev", plumbv1.SinkSlack, "http://x", "")
	revisions.Spec.Events = []plumbv1.NotificationEvent{plumbv1.EventRevisionFailed}
	suspended := notification("off", plumbv1.SinkWebhook, "http://x", "")
	suspended.Spec.Suspend = true
	am := notification("am", plumbv1.SinkAlertmanager, "http://x", "")
	am.Spec.Events = []plumbv1.NotificationEvent{plumbv1.EventRevisionFailed}
	drift := driftEvent(false)
	drift.AppLabels = map[string]string{"tier": "web"}
	other := drift
	other.AppLabels = map[string]string{"tier": "db"}
	elsewhere := drift
	elsewhere.App.Namespace = "other-team"
	failed := drift
	failed.Kind = plumbv1.EventRevisionFailed
	for _, tt := range []struct {
		name string
		n    plumbv1.Notification
		e    Event
		want bool
	}{
		{"a selected App", selected, drift, true},
		{"an App the selector leaves out", selected, other, false},
		{"an App of another namespace", selected, elsewhere, false},
		{"a revision event, by default not sent to a chat", selected, failed, false},
		{"the one event asked for", revisions, failed, true},
		{"an event not asked for", revisions, drift, false},
		{"a suspended Notification", suspended, drift, false},
		{"a revision event asked of Alertmanager, which only takes drift", am, failed, false},
	} {
		if got := wants(&tt.n, &tt.e); got != tt.want {
			t.Errorf("%s: wants = %v", tt.name, got)
		}
	}
}

func TestAlertmanagerAlertsFireStayFreshAndResolve(t *testing.T) {
	r := newReceiver(t)
	clock := clocktesting.NewFakeClock(changedAt.Add(time.Minute))
	f := newFixture(t, Options{Clock: clock, AlertRefresh: time.Minute}, notification("am", plumbv1.SinkAlertmanager, r.URL, ""))
	f.d.Notify(driftEvent(false))
	waitFor(t, "the alert", func() bool { return len(r.got()) == 1 })
	alerts := func(i int) amAlert {
		var a []amAlert
		if err := json.Unmarshal(r.got()[i].body, &a); err != nil || len(a) != 1 {
			t.Fatalf("request %d: %s", i, r.got()[i].body)
		}
		return a[0]
	}
	first := alerts(0)
	if r.got()[0].path != "/api/v2/alerts" || first.Labels["alertname"] != AlertName || first.Labels["namespace"] != "team" ||
		first.Labels["name"] != "web" || !first.EndsAt.After(clock.Now()) || !strings.Contains(first.Annotations["description"], "kubectl-edit") {
		t.Fatalf("firing alert %+v at %s", first, r.got()[0].path)
	}
	waitFor(t, "the refresh ticker", func() bool { return clock.HasWaiters() })
	clock.Step(time.Minute)
	waitFor(t, "the alert posted again", func() bool { return len(r.got()) == 2 })
	if again := alerts(1); !again.StartsAt.Equal(first.StartsAt) || !again.EndsAt.After(first.EndsAt) {
		t.Errorf("refresh %+v, want the same start and a later end than %+v", again, first)
	}
	resolved := driftEvent(false)
	resolved.Kind, resolved.Time = plumbv1.EventDriftResolved, clock.Now()
	f.d.Notify(resolved)
	waitFor(t, "the resolve", func() bool { return f.metrics.get("alertmanager/delivered") == 2 })
	if end := alerts(2); !end.StartsAt.Equal(first.StartsAt) || !end.EndsAt.Equal(resolved.Time) {
		t.Errorf("resolve %+v, want the first start and ends at %v", end, resolved.Time)
	}
	// Resolved: nothing is left to post again (and the refresh counted as
	// no event of its own).
	f.d.mu.Lock()
	open := len(f.d.alerts)
	f.d.mu.Unlock()
	if open != 0 {
		t.Errorf("%d alerts still open after the resolve", open)
	}
	if n := len(r.got()); n != 3 {
		t.Errorf("%d posts, want the alert, its refresh and its resolve", n)
	}
}

// A Notification cannot make the controller send a ServiceAccount's token
// (which it can read, and its author perhaps not) to an address of the
// author's choosing.
func TestAServiceAccountTokenIsNeverSent(t *testing.T) {
	r := newReceiver(t)
	f := newFixture(t, Options{}, notification("exfiltrate", plumbv1.SinkGitHub, r.URL, "default-token"))
	f.secrets["team/default-token"] = map[string][]byte{"token": []byte("eyJhbGciOi-service-account")}
	f.types["team/default-token"] = corev1.SecretTypeServiceAccountToken
	f.d.Notify(Event{Kind: plumbv1.EventRevisionPending, App: types.NamespacedName{Namespace: "team", Name: "web"},
		Source: "https://git.example.com/team/web.git", Commit: strings.Repeat("c", 40), Revision: "main@sha1:" + strings.Repeat("c", 40)})
	waitFor(t, "the refusal", func() bool { return f.metrics.get("github/failed") == 1 })
	if got := r.got(); len(got) != 0 {
		t.Errorf("%d requests reached the sink with a ServiceAccount token", len(got))
	}
}

// A value someone wrote into a live object cannot ping a Slack channel,
// forge a link or break out of its code span.
func TestSlackTextEscapesWhatOthersWrote(t *testing.T) {
	e := driftEvent(false)
	e.Objects[0].Fields[0].After = "<!channel> `x` & <https://evil.example|click>"
	text := slackText(&e)
	for _, bad := range []string{"<!channel>", "<https://", "`x`"} {
		if strings.Contains(text, bad) {
			t.Errorf("the message carries %q unescaped: %s", bad, text)
		}
	}
	if !strings.Contains(text, "&lt;!channel&gt;") || !strings.Contains(text, "kubectl-edit (Update at 2026-12-01T10:00:00Z)") {
		t.Errorf("message %s", text)
	}
}

// A team whose sinks all hang holds at most its share of the workers: the
// next team's events still go out.
func TestATeamWhoseSinksHangCannotHoldBackAnother(t *testing.T) {
	hung := newReceiver(t)
	hung.hold = make(chan struct{})
	t.Cleanup(func() { close(hung.hold) })
	other := newReceiver(t)
	var list []plumbv1.Notification
	for i := range 3 {
		list = append(list, notification(fmt.Sprint("hung-", i), plumbv1.SinkWebhook, hung.URL, ""))
	}
	elsewhere := notification("fine", plumbv1.SinkWebhook, other.URL, "")
	elsewhere.Namespace = "other-team"
	f := newFixture(t, Options{Workers: 3}, append(list, elsewhere)...)
	f.d.Notify(driftEvent(false)) // to the team's three hanging sinks
	waitFor(t, "a delivery to a hanging sink to start", func() bool {
		hung.mu.Lock()
		defer hung.mu.Unlock()
		return hung.attempts > 0
	})
	e := driftEvent(false)
	e.App.Namespace = "other-team"
	f.d.Notify(e)
	waitFor(t, "the other team's event", func() bool { return len(other.got()) == 1 })
	f.metrics.mu.Lock()
	defer f.metrics.mu.Unlock()
	if n := f.metrics.retries["webhook"]; n != 0 {
		t.Errorf("the other team's event went out only after %d hung deliveries gave way, want while they all hung", n)
	}
}

// Every open alert of a Notification is posted again at each refresh, not
// only one of them (Alertmanager would resolve the others).
func TestEveryOpenAlertIsRefreshed(t *testing.T) {
	r := newReceiver(t)
	clock := clocktesting.NewFakeClock(changedAt.Add(time.Minute))
	f := newFixture(t, Options{Clock: clock, AlertRefresh: time.Minute}, notification("am", plumbv1.SinkAlertmanager, r.URL, ""))
	apps := []string{"web", "api", "db", "cache"}
	for _, name := range apps {
		e := driftEvent(false)
		e.App.Name = name
		f.d.Notify(e)
	}
	waitFor(t, "the alerts", func() bool { return f.metrics.get("alertmanager/delivered") == len(apps) })
	waitFor(t, "the refresh ticker", func() bool { return clock.HasWaiters() })
	clock.Step(time.Minute)
	waitFor(t, "every alert posted again", func() bool { return len(r.got()) == 2*len(apps) })
	refreshed := map[string]bool{}
	for _, req := range r.got()[len(apps):] {
		var a []amAlert
		_ = json.Unmarshal(req.body, &a)
		refreshed[a[0].Labels["name"]] = true
	}
	if len(refreshed) != len(apps) {
		t.Errorf("refreshed %v, want all of %v", refreshed, apps)
	}
}

// TestTransportErrorsNameNoSinkHost: a sink that cannot be resolved,
// reached or trusted is reported (status, logs) by what went wrong, never
// by its host name or address, which come from the Notification's Secret.
func TestTransportErrorsNameNoSinkHost(t *testing.T) {
	tlsSink := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(tlsSink.Close)
	_, tlsPort, _ := strings.Cut(strings.TrimPrefix(tlsSink.URL, "https://"), ":")
	for _, tc := range []struct {
		name, address string
		secrets       []string // what must not be said
		client        *http.Client
		want          string
	}{
		{"a name that does not resolve", "http://plumb-sink-4711.invalid/hook", []string{"plumb-sink-4711", ".invalid"}, nil, "could not resolve"},
		{"a closed port", "http://localhost:1/hook", []string{"localhost", "127.0.0.1", ":1"}, nil, "refused the connection"},
		{"an untrusted certificate", "https://localhost:" + tlsPort + "/hook", []string{"localhost", "127.0.0.1", tlsPort, "example.com"}, nil, "certificate"},
		{"a blocked address", "http://localhost:1/hook", []string{"localhost", "127.0.0.1", ":1"}, NewClient(egress.DefaultBlockedPrefixes()), "blocked range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var reported []string
			f := newFixture(t, Options{MaxAge: 50 * time.Millisecond, Client: tc.client, Report: func(_ types.NamespacedName, delivered bool, message string) {
				mu.Lock()
				defer mu.Unlock()
				if !delivered {
					reported = append(reported, message)
				}
			}}, notification("hook", plumbv1.SinkWebhook, "", "hook"))
			f.secrets["team/hook"] = map[string][]byte{"address": []byte(tc.address)}
			f.d.Notify(driftEvent(false))
			waitFor(t, "the delivery to be given up", func() bool { return f.metrics.get("webhook/failed") == 1 })
			mu.Lock()
			said := strings.Join(reported, "\n")
			mu.Unlock()
			for _, entry := range f.logs.All() {
				said += "\n" + fmt.Sprint(entry.Message, entry.ContextMap())
			}
			if !strings.Contains(said, tc.want) {
				t.Errorf("nothing says %q:\n%s", tc.want, said)
			}
			for _, secret := range tc.secrets {
				if strings.Contains(said, secret) {
					t.Errorf("the sink's address shows (%q):\n%s", secret, said)
				}
			}
		})
	}
}

// TestAnOpenAlertIsAlwaysResolved: an Alertmanager Notification that
// holds a firing alert gets its resolve, even when its events no longer
// (or never did) ask for DriftResolved, or its appSelector no longer
// selects the App; after it nothing is posted again.
func TestAnOpenAlertIsAlwaysResolved(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before func(n *plumbv1.Notification)
		after  func(n *plumbv1.Notification) // applied once the alert fires
	}{
		{"events that omit DriftResolved", func(n *plumbv1.Notification) {
			n.Spec.Events = []plumbv1.NotificationEvent{plumbv1.EventDriftDetected}
		}, nil},
		{"an appSelector changed meanwhile", func(n *plumbv1.Notification) {
			n.Spec.AppSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "web"}}
		}, func(n *plumbv1.Notification) {
			n.Spec.AppSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "other"}}
		}},
		{"events changed meanwhile to revisions only", nil, func(n *plumbv1.Notification) {
			n.Spec.Events = []plumbv1.NotificationEvent{plumbv1.EventRevisionFailed}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newReceiver(t)
			clock := clocktesting.NewFakeClock(changedAt.Add(time.Minute))
			n := notification("am", plumbv1.SinkAlertmanager, r.URL, "")
			if tc.before != nil {
				tc.before(&n)
			}
			f := newFixture(t, Options{Clock: clock, AlertRefresh: time.Minute}, n)
			drift := driftEvent(false)
			drift.AppLabels = map[string]string{"team": "web"}
			f.d.Notify(drift)
			waitFor(t, "the alert", func() bool { return len(r.got()) == 1 })
			if tc.after != nil {
				f.mu.Lock()
				tc.after(&f.list[0])
				f.mu.Unlock()
			}
			resolved := drift
			resolved.Kind, resolved.Time, resolved.Objects = plumbv1.EventDriftResolved, clock.Now(), nil
			f.d.Notify(resolved)
			waitFor(t, "the resolve", func() bool { return len(r.got()) == 2 })
			var a []amAlert
			if err := json.Unmarshal(r.got()[1].body, &a); err != nil || len(a) != 1 || !a[0].EndsAt.Equal(resolved.Time) {
				t.Fatalf("second post %s, want the alert resolved at %v", r.got()[1].body, resolved.Time)
			}
			// The receiver records the post before it answers; the
			// dispatcher forgets the alert once the answer is back.
			waitFor(t, "the resolved alert to be forgotten", func() bool {
				f.d.mu.Lock()
				defer f.d.mu.Unlock()
				return len(f.d.alerts) == 0
			})
		})
	}
}

// TestTheDispatcherForgetsNotificationsThatAreGone: what it remembers per
// Notification (its last reported state, its open alerts) shrinks when
// Notifications are deleted, even those that are sent nothing more.
func TestTheDispatcherForgetsNotificationsThatAreGone(t *testing.T) {
	r := newReceiver(t)
	clock := clocktesting.NewFakeClock(changedAt.Add(time.Minute))
	var list []plumbv1.Notification
	for i := range 5 {
		list = append(list, notification(fmt.Sprint("hook-", i), plumbv1.SinkWebhook, r.URL, ""))
	}
	list = append(list, notification("am", plumbv1.SinkAlertmanager, r.URL, ""))
	// As many workers as Notifications: a busy namespace waits on the (fake) clock.
	f := newFixture(t, Options{Clock: clock, AlertRefresh: time.Minute, Workers: 6, PerNamespace: 6, Report: func(types.NamespacedName, bool, string) {}}, list...)
	f.d.Notify(driftEvent(false))
	waitFor(t, "every delivery", func() bool {
		return f.metrics.get("webhook/delivered") == 5 && f.metrics.get("alertmanager/delivered") == 1
	})
	remembered := func() (reported, alerts int) {
		f.d.mu.Lock()
		defer f.d.mu.Unlock()
		return len(f.d.reported), len(f.d.alerts)
	}
	if reported, alerts := remembered(); reported != 6 || alerts != 1 {
		t.Fatalf("remembers %d reported states and %d alerts, want 6 and 1", reported, alerts)
	}
	f.mu.Lock()
	f.list = f.list[:1] // all but hook-0 deleted
	f.mu.Unlock()
	waitFor(t, "the refresh ticker", func() bool { return clock.HasWaiters() })
	clock.Step(time.Minute)
	waitFor(t, "the deleted Notifications to be forgotten", func() bool {
		reported, alerts := remembered()
		return reported == 1 && alerts == 0
	})
}

// TestATermsAlertsEndWithIt: a Dispatcher delivers for one leadership
// term; once the term ends nothing of it goes on (no refresh of the
// alerts it opened, which the next leader may have resolved), events
// between terms are dropped, and the next term starts with nothing open.
func TestATermsAlertsEndWithIt(t *testing.T) {
	r := newReceiver(t)
	clock := clocktesting.NewFakeClock(changedAt.Add(time.Minute))
	n := notification("am", plumbv1.SinkAlertmanager, r.URL, "")
	metrics := &counts{results: map[string]int{}, retries: map[string]int{}}
	terms := NewTerms(Options{Clock: clock, AlertRefresh: time.Minute, Metrics: metrics, Client: NewClient(nil),
		Notifications: func(context.Context, string) ([]plumbv1.Notification, error) { return []plumbv1.Notification{n}, nil }})
	runTerm := func() (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		end := terms.Begin(ctx) // takes events from here on: no wait
		return func() { cancel(); end() }
	}

	stop := runTerm()
	terms.Notify(driftEvent(false))
	waitFor(t, "the alert", func() bool { return len(r.got()) == 1 })
	waitFor(t, "the refresh ticker", func() bool { return clock.HasWaiters() })
	stop() // returns once the term's goroutines have (its refresh among them)
	clock.Step(10 * time.Minute)
	terms.Notify(driftEvent(false)) // between terms
	if got := metrics.get("intake/dropped"); got != 1 {
		t.Errorf("%d events dropped between terms, want 1", got)
	}
	if n := len(r.got()); n != 1 {
		t.Errorf("%d posts, want only the alert (no refresh after its term ended)", n)
	}

	stop = runTerm()
	defer stop()
	terms.mu.Lock()
	open := len(terms.current.alerts)
	terms.mu.Unlock()
	if open != 0 {
		t.Errorf("the next term starts with %d open alerts, want none", open)
	}
}

// TestAResolveCatchesUpWithAnAlertStillOnItsWay: the resolve of an alert
// whose firing post is still being sent (a slow Alertmanager) reaches the
// Notification too, though its events never ask for resolves.
func TestAResolveCatchesUpWithAnAlertStillOnItsWay(t *testing.T) {
	r := newReceiver(t)
	r.hold = make(chan struct{})
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(r.hold) }) }) // before the server closes, should the test fail
	n := notification("am", plumbv1.SinkAlertmanager, r.URL, "")
	n.Spec.Events = []plumbv1.NotificationEvent{plumbv1.EventDriftDetected}
	f := newFixture(t, Options{}, n)
	f.d.Notify(driftEvent(false))
	waitFor(t, "the firing post to reach the sink", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.attempts == 1
	})
	resolved := driftEvent(false)
	resolved.Kind, resolved.Objects = plumbv1.EventDriftResolved, nil
	f.d.Notify(resolved)
	waitFor(t, "the resolve to be queued behind it", func() bool {
		f.d.mu.Lock()
		defer f.d.mu.Unlock()
		box := f.d.outboxes[types.NamespacedName{Namespace: "team", Name: "am"}]
		return box != nil && len(box.pending) == 2
	})
	release.Do(func() { close(r.hold) })
	waitFor(t, "the alert and its resolve", func() bool { return len(r.got()) == 2 })
	waitFor(t, "no alert left open", func() bool {
		f.d.mu.Lock()
		defer f.d.mu.Unlock()
		return len(f.d.alerts) == 0
	})
}

// TestATermEndingDuringADeliveryReportsNoFailure: a delivery cut short by
// the end of the term (the Lease lost, the process stopping) is no failure
// of the sink's: the Notification's status is not turned to failing, and
// nothing is logged as given up.
func TestATermEndingDuringADeliveryReportsNoFailure(t *testing.T) {
	r := newReceiver(t)
	r.hold = make(chan struct{})
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(r.hold) }) })
	n := notification("hook", plumbv1.SinkWebhook, r.URL, "")
	metrics := &counts{results: map[string]int{}, retries: map[string]int{}}
	core, logs := observer.New(zap.DebugLevel)
	var mu sync.Mutex
	var reported []string
	terms := NewTerms(Options{Metrics: metrics, Client: NewClient(nil), Log: zap.New(core),
		Notifications: func(context.Context, string) ([]plumbv1.Notification, error) { return []plumbv1.Notification{n}, nil },
		Report: func(_ types.NamespacedName, delivered bool, message string) {
			mu.Lock()
			defer mu.Unlock()
			reported = append(reported, fmt.Sprint(delivered, " ", message))
		}})
	ctx, cancel := context.WithCancel(context.Background())
	end := terms.Begin(ctx)
	terms.Notify(driftEvent(false))
	waitFor(t, "the delivery to reach the sink", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.attempts == 1
	})
	cancel()
	end()
	mu.Lock()
	defer mu.Unlock()
	if len(reported) != 0 {
		t.Errorf("reported %q at the end of the term, want nothing", reported)
	}
	if logs.FilterMessageSnippet("gave up").Len() != 0 {
		t.Errorf("logged a give-up at the end of the term: %v", logs.All())
	}
	if got := metrics.get("webhook/dropped"); got != 1 {
		t.Errorf("%d deliveries counted dropped, want the one cut short", got)
	}
}

// An alert's destination label is part of its identity in Alertmanager:
// an App whose destination changed while its alert was open resolves the
// alert it fired, not one with the new label (which would leave the first
// firing until it expires).
func TestAnAlertResolvesWithTheDestinationItFiredWith(t *testing.T) {
	r := newReceiver(t)
	clock := clocktesting.NewFakeClock(changedAt.Add(time.Minute))
	f := newFixture(t, Options{Clock: clock, AlertRefresh: time.Minute}, notification("am", plumbv1.SinkAlertmanager, r.URL, ""))
	fired := driftEvent(false)
	fired.Destination = "cluster-b"
	f.d.Notify(fired)
	waitFor(t, "the alert", func() bool { return len(r.got()) == 1 })
	resolved := fired
	resolved.Kind, resolved.Time, resolved.Objects, resolved.Destination = plumbv1.EventDriftResolved, clock.Now(), nil, "cluster-c"
	f.d.Notify(resolved)
	waitFor(t, "the resolve", func() bool { return len(r.got()) == 2 })
	for i, req := range r.got() {
		var a []amAlert
		if err := json.Unmarshal(req.body, &a); err != nil || len(a) != 1 || a[0].Labels["destination"] != "cluster-b" {
			t.Errorf("post %d %s, want the label destination=cluster-b", i, req.body)
		}
	}
}

// An App that deploys into another cluster is named with its destination:
// in the alert's labels, the summary and the webhook's JSON; an App into
// plumb's own cluster carries no destination.
func TestADestinationIsNamedInAlertsAndPayloads(t *testing.T) {
	r := newReceiver(t)
	f := newFixture(t, Options{}, notification("am", plumbv1.SinkAlertmanager, r.URL, ""))
	remote := driftEvent(false)
	remote.Destination = "cluster-b"
	f.d.Notify(remote)
	waitFor(t, "the alert", func() bool { return len(r.got()) == 1 })
	var alerts []amAlert
	if err := json.Unmarshal(r.got()[0].body, &alerts); err != nil || len(alerts) != 1 {
		t.Fatalf("request: %s", r.got()[0].body)
	}
	if a := alerts[0]; a.Labels["destination"] != "cluster-b" || !strings.Contains(a.Annotations["summary"], "team/web (cluster cluster-b)") {
		t.Errorf("alert %+v, want the label destination=cluster-b and the summary naming it", a)
	}
	payload, err := json.Marshal(remote)
	if err != nil || !strings.Contains(string(payload), `"destination":"cluster-b"`) {
		t.Errorf("payload %s, %v: want the destination", payload, err)
	}
	local := driftEvent(false)
	if payload, _ := json.Marshal(local); strings.Contains(string(payload), "destination") || strings.Contains(Summary(&local), "cluster") {
		t.Errorf("an App into plumb's own cluster: payload %s, summary %q; want no destination", payload, Summary(&local))
	}
}
