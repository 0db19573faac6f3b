package e2e

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// sink is a test HTTP receiver that records what it gets.
type sink struct {
	*httptest.Server
	mu       sync.Mutex
	received []sinkRequest
	code     int
}

type sinkRequest struct {
	path   string
	header http.Header
	body   []byte
	at     time.Time // when it arrived
}

func newSink(t *testing.T, code int) *sink {
	s := &sink{code: code}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.received = append(s.received, sinkRequest{path: r.URL.EscapedPath(), header: r.Header.Clone(), body: body, at: time.Now()})
		s.mu.Unlock()
		w.WriteHeader(s.code)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *sink) requests() []sinkRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sinkRequest(nil), s.received...)
}

// createNotification creates a Notification and its Secret in ns.
func createNotification(t *testing.T, ns, name string, sinkType plumbv1.SinkType, address string, secret map[string]string) {
	t.Helper()
	ctx := context.Background()
	n := &plumbv1.Notification{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: plumbv1.NotificationSpec{Type: sinkType, Address: address}}
	if secret != nil {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-sink"}, StringData: secret}
		if err := k8s.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		n.Spec.SecretRef = &plumbv1.LocalObjectReference{Name: s.Name}
	}
	if err := k8s.Create(ctx, n); err != nil {
		t.Fatal(err)
	}
}

// changeByHand patches a ConfigMap's color as another field manager would.
func changeByHand(t *testing.T, ns, name, color string) {
	t.Helper()
	cm, _ := getConfigMap(t, ns, name)
	patch := client.MergeFrom(cm.DeepCopy())
	cm.Data["color"] = color
	if err := k8s.Patch(context.Background(), cm, patch, client.FieldOwner("e2e-by-hand")); err != nil {
		t.Fatal(err)
	}
}

// webhookEvent is the generic webhook sink's payload, as a receiver reads it.
type webhookEvent struct {
	Kind string `json:"kind"`
	App  struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"app"`
	Revision string `json:"revision"`
	Commit   string `json:"commit"`
	Healed   bool   `json:"healed"`
	Count    int    `json:"count"`
	Objects  []struct {
		Kind, Namespace, Name string
		Fields                []struct {
			Path, Before, After, Manager, Operation string
			Time                                    *time.Time
		}
	} `json:"objects"`
}

func TestADriftIsNotifiedOnceSignedAndResolvedAfterHealing(t *testing.T) {
	setUp(t)
	ns := newNamespace(t)
	receiver := newSink(t, http.StatusOK)
	createNotification(t, ns, "team-hook", plumbv1.SinkWebhook, receiver.URL+"/plumb", map[string]string{"hmacKey": "receiver-key"})
	_, url, first := gitRepo(t, map[string]string{"deploy/config.yaml": configMapYAML("settings", "blue")})
	createApp(t, ns, "watched", url, nil) // driftPolicy heal
	readyAt(t, ns, "watched", first)
	if got := receiver.requests(); len(got) != 0 {
		t.Fatalf("%d notifications before any drift, want none (drift events only): %s", len(got), got[0].body)
	}

	changeByHand(t, ns, "settings", "red")
	eventually(t, 30*time.Second, "a DriftDetected and a DriftResolved", func() (bool, string) {
		return len(receiver.requests()) >= 2, fmt.Sprintf("%d notifications", len(receiver.requests()))
	})
	got := receiver.requests()
	var events []webhookEvent
	for _, r := range got {
		mac := hmac.New(sha256.New, []byte("receiver-key"))
		mac.Write(r.body)
		if want := "sha256=" + hex.EncodeToString(mac.Sum(nil)); r.header.Get("X-Plumb-Signature-256") != want || r.path != "/plumb" {
			t.Errorf("signature %q at %s, want %q", r.header.Get("X-Plumb-Signature-256"), r.path, want)
		}
		var e webhookEvent
		if err := json.Unmarshal(r.body, &e); err != nil {
			t.Fatal(err)
		}
		events = append(events, e)
	}
	detected, resolved := events[0], events[1]
	if detected.Kind != "DriftDetected" || resolved.Kind != "DriftResolved" {
		t.Fatalf("events %s then %s, want DriftDetected then DriftResolved", detected.Kind, resolved.Kind)
	}
	if detected.App.Namespace != ns || detected.App.Name != "watched" || !detected.Healed || detected.Count != 1 ||
		!strings.HasSuffix(detected.Revision, first) || detected.Commit != first || len(detected.Objects) != 1 {
		t.Fatalf("DriftDetected %s", got[0].body)
	}
	o := detected.Objects[0]
	if o.Kind != "ConfigMap" || o.Name != "settings" || len(o.Fields) == 0 {
		t.Fatalf("object %+v", o)
	}
	f := o.Fields[0]
	if f.Path != ".data.color" || f.Before != "blue" || f.After != "red" || f.Manager != "e2e-by-hand" || f.Operation != "Update" || f.Time == nil {
		t.Errorf("field %+v, want .data.color blue→red by e2e-by-hand (Update) with a time", f)
	}
	if cm, _ := getConfigMap(t, ns, "settings"); cm.Data["color"] != "blue" {
		t.Errorf("color %q: not healed", cm.Data["color"])
	}
	// A later tick of the healed App tells nothing more.
	before := metricValue(t, `plumb_syncs_total{trigger="manual"}`)
	requestSync(t, ns, "watched")
	eventually(t, 30*time.Second, "the requested tick", func() (bool, string) {
		return metricValue(t, `plumb_syncs_total{trigger="manual"}`) > before, "no manual sync counted"
	})
	readyAt(t, ns, "watched", first)
	// A second drift is a second episode; each Notification's events arrive
	// in order, so had the further tick told anything, it would come before
	// this episode's two.
	changeByHand(t, ns, "settings", "green")
	eventually(t, 30*time.Second, "the second episode's events", func() (bool, string) {
		return len(receiver.requests()) >= 4, fmt.Sprintf("%d notifications", len(receiver.requests()))
	})
	var kinds []string
	for _, r := range receiver.requests() {
		var e webhookEvent
		_ = json.Unmarshal(r.body, &e)
		kinds = append(kinds, e.Kind)
	}
	if want := "DriftDetected DriftResolved DriftDetected DriftResolved"; strings.Join(kinds, " ") != want {
		t.Errorf("notifications %v, want %s: one pair per episode, none for the tick between", kinds, want)
	}
}

// alertmanager runs a real Alertmanager on a free loopback port.
func alertmanager(t *testing.T) string {
	t.Helper()
	bin, err := testenv.ToolPath("alertmanager")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	config := filepath.Join(dir, "alertmanager.yml")
	if err := os.WriteFile(config, []byte("route:\n  receiver: none\nreceivers:\n  - name: none\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := testenv.FreeAddrsForTest(t, 1)[0]
	cmd := exec.Command(bin, "--config.file", config, "--storage.path", filepath.Join(dir, "data"),
		"--web.listen-address", addr, "--cluster.listen-address", "")
	logFile, err := os.Create(filepath.Join(dir, "alertmanager.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); logFile.Close() })
	eventually(t, 30*time.Second, "Alertmanager to be ready", func() (bool, string) {
		resp, err := http.Get("http://" + addr + "/-/ready")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	return "http://" + addr
}

// activeAlerts asks Alertmanager's API for its PlumbDrift alerts.
func activeAlerts(t *testing.T, am string) []struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
} {
	t.Helper()
	resp, err := http.Get(am + `/api/v2/alerts?filter=alertname%3D%22PlumbDrift%22`)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var alerts []struct {
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&alerts); err != nil {
		t.Fatal(err)
	}
	return alerts
}

func TestAlertmanagerReceivesADriftAndItsResolution(t *testing.T) {
	setUp(t)
	am := alertmanager(t)
	ns := newNamespace(t)
	createNotification(t, ns, "team-am", plumbv1.SinkAlertmanager, am, nil)
	_, url, first := gitRepo(t, map[string]string{"deploy/config.yaml": configMapYAML("settings", "blue")})
	createApp(t, ns, "alerted", url, func(a *plumbv1.App) { a.Spec.DriftPolicy = plumbv1.DriftPolicyAlert })
	readyAt(t, ns, "alerted", first)

	changeByHand(t, ns, "settings", "red")
	eventually(t, 30*time.Second, "Alertmanager to hold the drift alert", func() (bool, string) {
		alerts := activeAlerts(t, am)
		for _, a := range alerts {
			if a.Labels["namespace"] == ns && a.Labels["name"] == "alerted" {
				return strings.Contains(a.Annotations["description"], "e2e-by-hand") && strings.Contains(a.Annotations["summary"], "left in place"),
					fmt.Sprintf("alert %+v", a)
			}
		}
		return false, fmt.Sprintf("alerts %+v", alerts)
	})
	// Putting the field back by hand ends the episode: the alert resolves.
	changeByHand(t, ns, "settings", "blue")
	eventually(t, 30*time.Second, "the alert to resolve", func() (bool, string) {
		for _, a := range activeAlerts(t, am) {
			if a.Labels["namespace"] == ns && a.Labels["name"] == "alerted" {
				return false, "still active"
			}
		}
		return true, ""
	})
	if got := metricValue(t, `plumb_notifications_total{result="delivered",sink="alertmanager"}`); got < 2 {
		t.Errorf("%v alertmanager deliveries counted, want at least the alert and its resolution", got)
	}
}

// githubAPI speaks enough of GitHub's REST API for commit statuses: POST
// /repos/{owner}/{repo}/statuses/{sha} with a bearer token.
type githubAPI struct {
	*httptest.Server
	mu       sync.Mutex
	statuses []githubStatus
}

type githubStatus struct {
	Repo, SHA, Token            string
	State, Context, Description string
}

func newGitHubAPI(t *testing.T) *githubAPI {
	api := &githubAPI{}
	api.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/repos/"), "/")
		if r.Method != http.MethodPost || len(parts) != 4 || parts[2] != "statuses" {
			http.Error(w, `{"message":"Not Found"}`, http.StatusNotFound)
			return
		}
		var body struct{ State, Context, Description string }
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.State == "" {
			http.Error(w, `{"message":"Validation Failed"}`, http.StatusUnprocessableEntity)
			return
		}
		api.mu.Lock()
		api.statuses = append(api.statuses, githubStatus{Repo: parts[0] + "/" + parts[1], SHA: parts[3],
			Token: strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), State: body.State, Context: body.Context, Description: body.Description})
		api.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"state":"` + body.State + `"}`))
	}))
	t.Cleanup(api.Close)
	return api
}

func (a *githubAPI) got() []githubStatus {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]githubStatus(nil), a.statuses...)
}

func TestCommitStatusesReachGitHubPendingThenSuccessAndFailureNamingThePhase(t *testing.T) {
	setUp(t)
	api := newGitHubAPI(t)
	ns := newNamespace(t)
	createNotification(t, ns, "statuses", plumbv1.SinkGitHub, api.URL, map[string]string{"token": "ghp-e2e-token"})
	w, url, first := gitRepoNamed(t, "acme/"+ns+".git", map[string]string{"deploy/config.yaml": configMapYAML("settings", "blue")})
	createApp(t, ns, "shipped", url, nil)
	readyAt(t, ns, "shipped", first)
	context := "plumb/" + ns + "/shipped"
	eventually(t, 30*time.Second, "pending then success for the first commit", func() (bool, string) {
		got := api.got()
		return len(got) == 2, fmt.Sprintf("statuses %+v", got)
	})
	for i, want := range []string{"pending", "success"} {
		s := api.got()[i]
		if s.State != want || s.SHA != first || s.Repo != "acme/"+ns || s.Context != context || s.Token != "ghp-e2e-token" {
			t.Errorf("status %d: %+v, want %s on acme/%s@%s with context %s and the Secret's token", i, s, want, ns, first, context)
		}
	}

	bad := commit(t, w, map[string]string{"deploy/config.yaml": "kind: ["})
	requestSync(t, ns, "shipped")
	notReady(t, ns, "shipped", "ReadFailed")
	eventually(t, 30*time.Second, "a failure status naming the read phase", func() (bool, string) {
		for _, s := range api.got() {
			if s.SHA == bad && s.State == "failure" {
				return strings.Contains(s.Description, "read phase"), fmt.Sprintf("failure status %+v", s)
			}
		}
		return false, fmt.Sprintf("statuses %+v", api.got())
	})
}

func TestASinkThatIsDownSlowsNoTickAndGetsEverythingOnceItIsBack(t *testing.T) {
	setUp(t)
	ns := newNamespace(t)
	// The down sink answers 503 until it comes back; it records only what
	// it accepts.
	var mu sync.Mutex
	var up bool
	var slowGot []string
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if !up {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		var e webhookEvent
		_ = json.NewDecoder(r.Body).Decode(&e)
		slowGot = append(slowGot, e.Kind)
	}))
	t.Cleanup(slow.Close)
	fast := newSink(t, http.StatusOK)
	createNotification(t, ns, "slow", plumbv1.SinkWebhook, slow.URL, nil)
	createNotification(t, ns, "fast", plumbv1.SinkWebhook, fast.URL, nil)
	_, url, first := gitRepo(t, map[string]string{"deploy/config.yaml": configMapYAML("settings", "blue")})
	createApp(t, ns, "busy", url, nil)
	readyAt(t, ns, "busy", first)

	const episodes = 3
	ticks := `plumb_syncs_total{trigger="drift"}`
	before := metricValue(t, ticks)
	for i := range episodes {
		changeByHand(t, ns, "settings", fmt.Sprintf("hand-%d", i))
		eventually(t, 30*time.Second, "the episode's two events at the fast sink", func() (bool, string) {
			return len(fast.requests()) == 2*(i+1), fmt.Sprintf("%d events", len(fast.requests()))
		})
	}
	if got := metricValue(t, ticks); got < before+episodes {
		t.Errorf("%v drift ticks for %d episodes while a sink was down, want at least %d", got-before, episodes, episodes)
	}
	mu.Lock()
	up = true
	mu.Unlock()
	eventually(t, 90*time.Second, "the sink that was down to get every event, in order", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return len(slowGot) == 2*episodes, fmt.Sprintf("%v", slowGot)
	})
	mu.Lock()
	defer mu.Unlock()
	for i, kind := range slowGot {
		if want := []string{"DriftDetected", "DriftResolved"}[i%2]; kind != want {
			t.Errorf("event %d at the sink that was down: %s, want %s (order lost)", i, kind, want)
		}
	}
}

// A Notification that cannot deliver says why in its status, where the
// team that wrote it can see it (not only in the controller's log).
func TestANotificationThatCannotDeliverSaysWhyInItsStatus(t *testing.T) {
	setUp(t)
	ns := newNamespace(t)
	n := &plumbv1.Notification{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mistyped"},
		Spec: plumbv1.NotificationSpec{Type: plumbv1.SinkWebhook, Address: "http://127.0.0.1:1/hook",
			SecretRef: &plumbv1.LocalObjectReference{Name: "no-such-secret"}}}
	if err := k8s.Create(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	_, url, first := gitRepo(t, map[string]string{"deploy/config.yaml": configMapYAML("settings", "blue")})
	createApp(t, ns, "told", url, nil)
	readyAt(t, ns, "told", first)
	changeByHand(t, ns, "settings", "red")
	eventually(t, 30*time.Second, "the Notification's Ready condition to say why", func() (bool, string) {
		got := &plumbv1.Notification{}
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(n), got); err != nil {
			return false, err.Error()
		}
		for _, c := range got.Status.Conditions {
			if c.Type == plumbv1.ConditionReady {
				return c.Status == metav1.ConditionFalse && c.Reason == plumbv1.ReasonDeliveryFailed &&
					strings.Contains(c.Message, "no-such-secret"), fmt.Sprintf("Ready %s %s: %s", c.Status, c.Reason, c.Message)
			}
		}
		return false, "no Ready condition"
	})
}
