package main

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"

	"github.com/plumb-dev/plumb/internal/testenv"
)

// dashboard is a running plumb ui.
type dashboard struct {
	// url is its base URL (ending in /); login is the URL it printed,
	// with its session token (proxy mode has none: login is url).
	url, login string
	// client holds the session's cookie.
	client *http.Client
	stop   func()
}

// startUI runs plumb ui with kubeconfig (and more flags) on a free
// loopback address.
func startUI(t *testing.T, kubeconfig string, flags ...string) *dashboard {
	t.Helper()
	return startUIAt(t, testenv.FreeAddrsForTest(t, 1)[0], kubeconfig, flags...)
}

// startUIAt runs plumb ui on addr (with the session token token, when
// not "") until stop or the test's end, and opens a session.
func startUIAt(t *testing.T, addr, kubeconfig string, flags ...string) *dashboard {
	t.Helper()
	return startUIWith(t, addr, kubeconfig, "", flags...)
}

func startUIWith(t *testing.T, addr, kubeconfig, token string, flags ...string) *dashboard {
	t.Helper()
	cmd := exec.Command(plumbBinary, append([]string{"ui", "--addr", addr, "--kubeconfig", kubeconfig}, flags...)...)
	if token != "" {
		cmd.Env = append(os.Environ(), "PLUMB_UI_TOKEN="+token)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() { once.Do(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }) }
	t.Cleanup(stop)
	url := make(chan string, 1)
	go func() {
		scanner := bufio.NewScanner(stdout)
		for scanner.Scan() {
			if _, rest, ok := strings.Cut(scanner.Text(), "Serving the dashboard at "); ok {
				url <- strings.Fields(rest)[0]
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	var login string
	select {
	case login = <-url:
	case <-time.After(time.Minute):
		t.Fatal("plumb ui printed no URL within a minute")
	}
	jar, _ := cookiejar.New(nil)
	d := &dashboard{url: strings.SplitN(login, "?", 2)[0], login: login, client: &http.Client{Jar: jar, Timeout: time.Minute}, stop: stop}
	resp, err := d.client.Get(login)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return d
}

// startProxyUI runs plumb ui --proxy on the Unix socket at socket until
// the test's end, and waits until it serves.
func startProxyUI(t *testing.T, kubeconfig, socket string, flags ...string) {
	t.Helper()
	cmd := exec.Command(plumbBinary, append([]string{"ui", "--proxy", "--addr", "unix://" + socket, "--kubeconfig", kubeconfig}, flags...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	serving := make(chan string, 1)
	go func() {
		scanner := bufio.NewScanner(stdout)
		for scanner.Scan() {
			if strings.Contains(scanner.Text(), "Serving the dashboard at unix://"+socket) {
				serving <- scanner.Text()
			}
		}
	}()
	select {
	case <-serving:
	case <-time.After(time.Minute):
		t.Fatal("plumb ui --proxy on a Unix socket printed no URL within a minute")
	}
	if info, err := os.Stat(socket); err != nil || info.Mode()&os.ModeSocket == 0 || info.Mode().Perm()&0o007 != 0 {
		t.Errorf("the dashboard's socket %s: %v %v, want a socket others may not open", socket, info, err)
	}
}

// browser is a headless Chromium (Debian's, installed by make browser).
func browser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("no chromium on PATH: make browser installs it (bash hack/browser.sh)")
	}
	allocator, cancelAllocator := chromedp.NewExecAllocator(context.Background(),
		append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.Headless, chromedp.WindowSize(390, 844))...)
	ctx, cancel := chromedp.NewContext(allocator)
	ctx, cancelTimeout := context.WithTimeout(ctx, 10*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancel(); cancelAllocator() })
	return ctx
}

// screenshot writes the page, as PNG (quality 100), into the tests' output folder
// ($PLUMB_TEST_OUTPUT, or plumb-test-output under the system's temporary
// folder).
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("PLUMB_TEST_OUTPUT")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "plumb-test-output")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// text is the text of the element sel.
func text[S chromedp.Selectable](t *testing.T, ctx context.Context, sel S) string {
	t.Helper()
	got, err := chromedp.Run(ctx, chromedp.Text(sel))
	if err != nil {
		t.Fatalf("reading %v: %v", sel, err)
	}
	return got
}

// open navigates to url and waits until sel is visible.
func open[S chromedp.Selectable](t *testing.T, ctx context.Context, url string, sel S) {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.Navigate(url), chromedp.WaitVisible(sel)); err != nil {
		t.Fatalf("opening %s: %v", url, err)
	}
}

// click clicks sel (a button whose form navigates) and waits until next
// is visible.
func click[S, N chromedp.Selectable](t *testing.T, ctx context.Context, sel S, next N) {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.Click(sel), chromedp.WaitVisible(next)); err != nil {
		t.Fatalf("clicking %v: %v", sel, err)
	}
}

// axeSource is axe-core, vendored (testdata/axe).
//
//go:embed testdata/axe/axe.min.js
var axeSource string

// accessible runs axe-core's WCAG 2.1 A and AA rules on the page open in
// ctx and fails the test with every violation.
func accessible(t *testing.T, ctx context.Context, page string) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void](axeSource)); err != nil {
		t.Fatalf("loading axe-core into %s: %v", page, err)
	}
	type violation struct {
		ID, Impact, Help string
		Nodes            []string
	}
	violations, err := chromedp.Run(ctx, chromedp.Evaluate[[]violation](`axe.run(document, {runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa']}})
		.then(r => r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.map(n => n.target.join(' ') + ': ' + n.failureSummary)})))`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("axe-core on %s: %v", page, err)
	}
	for _, v := range violations {
		t.Errorf("%s: accessibility violation %s (%s): %s\n  %s", page, v.ID, v.Impact, v.Help, strings.Join(v.Nodes, "\n  "))
	}
}

// waitText polls the text of sel, without reloading the page, until it
// holds every one of wants (a minute at most).
func waitText[S chromedp.Selectable](t *testing.T, ctx context.Context, sel S, wants ...string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		got, err := chromedp.Run(ctx, chromedp.Text(sel, chromedp.AtLeast(0)))
		if err != nil {
			return false, nil
		}
		last = got
		for _, want := range wants {
			if !strings.Contains(got, want) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("%v never showed %q (last: %q)", sel, wants, last)
	}
}

// waitExact polls the text of sel until it is want.
func waitExact[S chromedp.Selectable](t *testing.T, ctx context.Context, sel S, want string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		got, err := chromedp.Run(ctx, chromedp.Text(sel, chromedp.AtLeast(0)))
		last = got
		return err == nil && strings.TrimSpace(got) == want, nil
	})
	if err != nil {
		t.Fatalf("%v never was %q (last: %q)", sel, want, last)
	}
}

// eventStream is a live stream read in the background.
type eventStream struct {
	mu    sync.Mutex
	bytes []byte
}

// readStream opens url with c as an event stream and reads it until the test
// ends.
func readStream(t *testing.T, c *http.Client, url string) *eventStream {
	t.Helper()
	return readStreamWith(t, c, url, nil)
}

// readStreamWith opens url with c and headers as an event stream and
// reads it until the test ends.
func readStreamWith(t *testing.T, c *http.Client, url string, headers map[string]string) *eventStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET %s: %s %q", url, resp.Status, resp.Header.Get("Content-Type"))
	}
	s := &eventStream{}
	go func() {
		defer resp.Body.Close()
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			s.mu.Lock()
			s.bytes = append(s.bytes, buf[:n]...)
			s.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return s
}

// until waits until the stream holds want, and returns what it read.
func (s *eventStream) until(t *testing.T, want string) string {
	t.Helper()
	var got string
	eventually(t, "the live stream sends "+want, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		got = string(s.bytes)
		return strings.Contains(got, want)
	})
	return got
}

// fetch fetches url with c and returns its status and body.
func fetch(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// kubectl runs the control plane's kubectl with the package cluster's
// kubeconfig.
func kubectl(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command(cluster.Binaries.Path("kubectl"), append([]string{"--kubeconfig", cluster.KubeconfigPath}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// TestTheDashboard drives plumb ui in a headless Chromium at phone width,
// with the controller running: the Apps page lists Apps with their real
// status and a drift made with kubectl with its manager; the App page
// shows the phases, the ticks, the drift and the diff after a new commit;
// Sync from the page brings a tick whose handling the page then shows;
// Suspend asks to confirm; a user who may not patch Apps sees a refusal
// and nothing changes; no Secret value reaches a page; cross-origin posts
// and foreign Host names are refused.
func TestTheDashboard(t *testing.T) {
	w := newWorld(t, "cli-ui")
	ns := w.ns
	const secretValue, driftedSecretValue = "ui-s3cret-in-git", "ui-s3cret-drifted"
	commit := w.push("first", map[string]string{
		"web/configmap.yaml": configMap(ns, "web", map[string]string{"greeting": "hello"}),
		"web/secret.yaml":    secret(ns, "web-token", secretValue),
		// A PreSync hook: each sync of the App is an ordered one.
		"web/migrated.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-migrated\n  namespace: " + ns +
			"\n  annotations: {argocd.argoproj.io/hook: PreSync}\n",
	})
	w.createApp("web", "web", func(app *plumbv1.App) { app.Spec.DriftPolicy = plumbv1.DriftPolicyAlert })
	w.waitReady("web", commit)
	addr := testenv.FreeAddrsForTest(t, 1)[0]
	const token = "the-dashboard-test-session-token-0123456789"
	ui := startUIWith(t, addr, cluster.KubeconfigPath, token)
	url, stopUI := ui.url, ui.stop
	parent := t
	appURL := url + "apps/" + ns + "/web"
	ctx := browser(t)
	rowID := chromedp.ID("app-" + ns + "_web")

	// noSecret fails if a page's bytes hold a Secret value, plain or base64.
	noSecret := func(t *testing.T, where, body string) {
		t.Helper()
		for _, value := range []string{secretValue, driftedSecretValue} {
			for _, form := range []string{value, base64.StdEncoding.EncodeToString([]byte(value))} {
				if strings.Contains(body, form) {
					t.Errorf("%s holds the Secret value %q", where, form)
				}
			}
		}
	}

	t.Run("the Apps page lists the App with its real status", func(t *testing.T) {
		if status, _ := fetch(t, http.DefaultClient, url); status != http.StatusUnauthorized {
			t.Errorf("a request without the session: %d, want 401", status)
		}
		if status, _ := fetch(t, http.DefaultClient, url+"?token=not-the-token"); status != http.StatusUnauthorized {
			t.Errorf("a request with another token: %d, want 401", status)
		}
		open(t, ctx, ui.login, rowID) // the printed URL: the browser's session
		resp, err := ui.client.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		csp := resp.Header.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'none'", "script-src 'self';", "connect-src 'self';", "form-action 'self'", "frame-ancestors 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("Content-Security-Policy %q lacks %s", csp, want)
			}
		}
		if strings.Contains(csp, "unsafe") || strings.Contains(csp, "http") {
			t.Errorf("Content-Security-Policy %q allows inline code or another origin", csp)
		}
		open(t, ctx, url+"?namespace="+ns, rowID)
		waitText(t, ctx, rowID, ns, "web", "True", "main@sha1:"+commit[:7], "Applied revision main@sha1:"+commit)
		waitText(t, ctx, chromedp.ID("count-ready"), "1")
		screenshot(t, ctx, "apps")
		accessible(t, ctx, "the Apps page")
	})

	t.Run("a drift made with kubectl appears live, with the manager's name, in no Secret's value", func(t *testing.T) {
		open(t, ctx, url+"?namespace="+ns, rowID)
		waitExact(t, ctx, chromedp.ID("live-state"), "live")
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[int]("window.plumbTestMarker = 42")); err != nil {
			t.Fatal(err)
		}
		stream := readStream(t, ui.client, url+"events")
		kubectl(t, "patch", "configmap", "web", "-n", ns, "--type", "merge", "-p", `{"data":{"greeting":"hi"}}`)
		kubectl(t, "patch", "secret", "web-token", "-n", ns, "--type", "merge", "-p", `{"stringData":{"password":"`+driftedSecretValue+`"}}`)
		waitText(t, ctx, chromedp.CSS("#app-"+ns+"_web .drift"), "2 by kubectl-patch")
		if marker, err := chromedp.Run(ctx, chromedp.Evaluate[int]("window.plumbTestMarker || 0")); err != nil || marker != 42 {
			t.Errorf("the page was reloaded (marker %d, %v): the drift must arrive live", marker, err)
		}
		if drifted := text(t, ctx, chromedp.ID("count-drifted")); drifted != "1" {
			t.Errorf("the drifted count = %q, want 1", drifted)
		}
		screenshot(t, ctx, "apps-drifted")
		bytes := stream.until(t, `"drift":2`)
		noSecret(t, "the live stream", bytes)
		_, body := fetch(t, ui.client, url+"?namespace="+ns)
		noSecret(t, "the Apps page", body)
		// The status filter.
		for status, listed := range map[string]bool{"drifted": true, "ready": true, "failing": false, "suspended": false} {
			if _, body := fetch(t, ui.client, url+"?namespace="+ns+"&status="+status); strings.Contains(body, `id="app-`+ns+`_web"`) != listed {
				t.Errorf("status filter %s: the drifted, Ready App listed %v, want %v", status, !listed, listed)
			}
		}
	})

	t.Run("the App page shows the phases, ticks, drift and the diff after a new commit", func(t *testing.T) {
		w.push("second", map[string]string{"web/configmap.yaml": configMap(ns, "web", map[string]string{"greeting": "bonjour"})})
		open(t, ctx, appURL, chromedp.ID("phases"))
		for phase, want := range map[string]string{"read": "ok", "observe": "ok", "diff": "ok", "apply": "ok"} {
			if got := text(t, ctx, chromedp.ID("phase-"+phase)); !strings.Contains(got, want) {
				t.Errorf("phase %s: %q, want %q", phase, got, want)
			}
		}
		if ticks := text(t, ctx, chromedp.ID("ticks")); !strings.Contains(ticks, "spec") || !strings.Contains(ticks, "Succeeded") {
			t.Errorf("the ticks lack the first (spec) tick's success: %q", ticks)
		}
		drift := text(t, ctx, chromedp.ID("drift"))
		for _, want := range []string{"ConfigMap/" + ns + "/web", ".data.greeting", "kubectl-patch", "Secret/" + ns + "/web-token"} {
			if !strings.Contains(drift, want) {
				t.Errorf("the drift section lacks %q: %q", want, drift)
			}
		}
		diff := text(t, ctx, chromedp.ID("diff"))
		for _, want := range []string{"ConfigMap/" + ns + "/web", "+  greeting: bonjour", "-  greeting: hi", "kubectl-patch"} {
			if !strings.Contains(diff, want) {
				t.Errorf("the diff lacks %q:\n%s", want, diff)
			}
		}
		if inventory := text(t, ctx, chromedp.ID("inventory")); !strings.Contains(inventory, "ConfigMap") || !strings.Contains(inventory, "web-token") {
			t.Errorf("the inventory lacks the App's objects: %q", inventory)
		}
		if synced := text(t, ctx, chromedp.ID("ordered-sync")); !strings.Contains(synced, "PreSync") || !strings.Contains(synced, "ConfigMap/"+ns+"/web-migrated") {
			t.Errorf("the ordered sync lacks its PreSync hook: %q", synced)
		}
		if events := text(t, ctx, chromedp.ID("events")); !strings.Contains(events, "DriftDetected") {
			t.Errorf("the Events lack DriftDetected: %q", events)
		}
		screenshot(t, ctx, "app")
		accessible(t, ctx, "the App page")
		_, body := fetch(t, ui.client, appURL)
		noSecret(t, "the App page", body)
	})

	t.Run("Sync from the page, by keyboard, brings a tick that the page shows handled live", func(t *testing.T) {
		before := w.app("web").Status.LastHandledSyncRequest
		open(t, ctx, appURL, chromedp.ID("sync"))
		// By keyboard: Tab until the Sync button has the focus, then Enter.
		focused := ""
		for i := 0; i < 30 && focused != "sync"; i++ {
			if err := chromedp.Do(ctx, chromedp.KeyEvent(kb.Tab)); err != nil {
				t.Fatal(err)
			}
			focused, _ = chromedp.Run(ctx, chromedp.Evaluate[string]("document.activeElement.id"))
		}
		if focused != "sync" {
			t.Fatal("30 Tabs never reached the Sync button")
		}
		// The controller is frozen until the page shows the request
		// waiting: then the handled sync can only arrive live.
		if err := w.controller.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		resume := func() { _ = w.controller.Signal(syscall.SIGCONT) }
		t.Cleanup(resume)
		if err := chromedp.Do(ctx, chromedp.KeyEvent(kb.Enter), chromedp.WaitVisible(chromedp.ID("sync-progress"))); err != nil {
			t.Fatalf("Enter on the Sync button: %v", err)
		}
		attr, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.ID("sync-progress"), "data-request"))
		request := attr.Value
		if err != nil || request == "" {
			t.Fatalf("the page names no sync request: %q %v", request, err)
		}
		if state := text(t, ctx, chromedp.ID("sync-state")); !strings.HasPrefix(state, "Sync requested at") {
			t.Fatalf("the page says %q while the controller is frozen, want the request waiting", state)
		}
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[int]("window.plumbTestMarker = 7")); err != nil {
			t.Fatal(err)
		}
		resume()
		waitText(t, ctx, chromedp.ID("sync-state"), "Sync handled: ")
		if marker, err := chromedp.Run(ctx, chromedp.Evaluate[int]("window.plumbTestMarker || 0")); err != nil || marker != 7 {
			t.Errorf("the page was reloaded (marker %d, %v): the handled sync must arrive live", marker, err)
		}
		if got := w.app("web").Status.LastHandledSyncRequest; got == before || got != request {
			t.Errorf("lastHandledSyncRequest = %q, want the page's request %q", got, request)
		}
	})

	t.Run("Suspend asks to confirm; Resume undoes it", func(t *testing.T) {
		open(t, ctx, appURL, chromedp.ID("suspend"))
		click(t, ctx, chromedp.ID("suspend"), chromedp.ID("confirm-suspend"))
		accessible(t, ctx, "the Suspend confirmation")
		if w.app("web").Spec.Suspend {
			t.Fatal("the App was suspended before the confirmation")
		}
		click(t, ctx, chromedp.ID("suspend-confirmed"), chromedp.ID("resume"))
		if !w.app("web").Spec.Suspend {
			t.Fatal("the confirmed Suspend did not suspend the App")
		}
		click(t, ctx, chromedp.ID("resume"), chromedp.ID("sync"))
		if w.app("web").Spec.Suspend {
			t.Fatal("Resume did not resume the App")
		}
	})

	t.Run("a user who may not patch Apps sees a refusal and nothing changes", func(t *testing.T) {
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "dashboard-viewer"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{plumbv1.GroupVersion.Group}, Resources: []string{"apps"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"list"}},
		}}
		binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "dashboard-viewer"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "dashboard-viewer"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "viewer"}}}
		for _, obj := range []client.Object{role, binding} {
			if err := w.k8s.Create(context.Background(), obj); err != nil {
				t.Fatal(err)
			}
		}
		viewer := startUI(t, w.kubeconfigOf("viewer"))
		viewerURL := viewer.url
		open(t, ctx, viewer.login, chromedp.ID("main"))
		eventually(t, "the viewer's Role in force", func() bool {
			status, _ := fetch(t, viewer.client, viewerURL+"apps/"+ns+"/web")
			return status == http.StatusOK
		})
		before := w.app("web")
		for _, action := range []struct{ button, wants string }{
			{"sync", "Your Kubernetes rights do not let you ask App " + ns + "/web for a sync"},
			{"suspend", ""}, // asks to confirm first
			{"suspend-confirmed", "Your Kubernetes rights do not let you suspend App " + ns + "/web"},
		} {
			if action.wants == "" {
				open(t, ctx, viewerURL+"apps/"+ns+"/web", chromedp.ID(action.button))
				click(t, ctx, chromedp.ID(action.button), chromedp.ID("confirm-suspend"))
				continue
			}
			if action.button == "sync" {
				open(t, ctx, viewerURL+"apps/"+ns+"/web", chromedp.ID(action.button))
			}
			click(t, ctx, chromedp.ID(action.button), chromedp.ID("error"))
			if got := text(t, ctx, chromedp.ID("error")); !strings.Contains(got, action.wants) || !strings.Contains(got, "forbidden") {
				t.Errorf("after %s: %q, want %q and the API server's reason", action.button, got, action.wants)
			}
		}
		screenshot(t, ctx, "refused")
		accessible(t, ctx, "a refusal")
		after := w.app("web")
		if after.Annotations[plumbv1.AnnotationSyncRequestedAt] != before.Annotations[plumbv1.AnnotationSyncRequestedAt] || after.Spec.Suspend {
			t.Errorf("the refused actions changed the App: sync %q → %q, suspend %v",
				before.Annotations[plumbv1.AnnotationSyncRequestedAt], after.Annotations[plumbv1.AnnotationSyncRequestedAt], after.Spec.Suspend)
		}
	})

	t.Run("many tabs share one stream and all update live", func(t *testing.T) {
		const tabs = 8 // more than a browser's 6 connections per origin, and than the 4 streams a viewer may open
		var contexts []context.Context
		for i := 0; i < tabs; i++ {
			tab, cancel := chromedp.NewContext(ctx)
			t.Cleanup(cancel)
			open(t, tab, url+"?namespace="+ns, rowID)
			contexts = append(contexts, tab)
		}
		patchWeb(t, w, `{"spec":{"suspend":true}}`)
		for i, tab := range contexts {
			waitText(t, tab, rowID, "suspended")
			if state := text(t, tab, chromedp.ID("live-state")); state != "live" {
				t.Errorf("tab %d: updates %q, want live", i, state)
			}
		}
		patchWeb(t, w, `{"spec":{"suspend":false}}`)
	})

	t.Run("a viewer's streams are bounded", func(t *testing.T) {
		// With no page of the browser open, the viewer may open 4 streams,
		// and the fifth is refused with a Retry-After.
		if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
			t.Fatal(err)
		}
		var accepted int
		var retryAfter string
		eventually(t, "4 streams accepted and the fifth refused", func() bool {
			var streams []*http.Response
			defer func() {
				for _, r := range streams {
					r.Body.Close()
				}
			}()
			accepted, retryAfter = 0, ""
			for range 6 {
				resp, err := ui.client.Get(url + "events")
				if err != nil {
					t.Fatal(err)
				}
				streams = append(streams, resp)
				if resp.StatusCode == http.StatusTooManyRequests {
					retryAfter = resp.Header.Get("Retry-After")
					break
				}
				accepted++
			}
			return accepted == 4 && retryAfter != ""
		})
	})

	t.Run("the page reconnects when plumb ui comes back", func(t *testing.T) {
		open(t, ctx, url+"?namespace="+ns, rowID)
		waitExact(t, ctx, chromedp.ID("live-state"), "live")
		stopUI()
		waitText(t, ctx, chromedp.ID("live-state"), "offline: reconnecting")
		startUIWith(parent, addr, cluster.KubeconfigPath, token) // the same session; it serves the later subtests too
		waitExact(t, ctx, chromedp.ID("live-state"), "live")
		patchWeb(t, w, `{"spec":{"suspend":true}}`)
		waitText(t, ctx, rowID, "suspended")
		patchWeb(t, w, `{"spec":{"suspend":false}}`)
	})

	t.Run("a javascript: URL is never a live link", func(t *testing.T) {
		// The API server refuses such a source URL (the CRD's pattern); a
		// message can still hold one, and does here: the folder is missing.
		refused := &plumbv1.App{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "refused"}, Spec: plumbv1.AppSpec{
			Source: plumbv1.Source{URL: "javascript:alert(1)//github.com/acme/shop", Ref: plumbv1.GitRef{Branch: "main"}}}}
		if err := w.k8s.Create(context.Background(), refused); err == nil || !strings.Contains(err.Error(), "spec.source.url") {
			t.Errorf("an App with a javascript: source URL: %v, want the API server's refusal", err)
		}
		w.createApp("hostile", "javascript:alert(1)", nil)
		w.waitFor("hostile", "its Read failed", func(app *plumbv1.App) bool {
			return strings.Contains(readyMessage(app), "javascript:")
		})
		for _, page := range []string{url + "?namespace=" + ns, url + "apps/" + ns + "/hostile"} {
			open(t, ctx, page, chromedp.ID("main"))
			waitText(t, ctx, chromedp.ID("main"), "javascript:alert(1)")
			links, err := chromedp.Run(ctx, chromedp.Evaluate[[]string]("Array.from(document.querySelectorAll('[href],[src],[action]')).map(e => e.getAttribute('href') || e.getAttribute('src') || e.getAttribute('action'))"))
			if err != nil {
				t.Fatal(err)
			}
			for _, link := range links {
				if strings.HasPrefix(strings.ToLower(strings.TrimSpace(link)), "javascript:") {
					t.Errorf("%s links to %q", page, link)
				}
			}
		}
		if err := w.k8s.Delete(context.Background(), w.app("hostile")); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("previews keep to the read limits plumb ui is given (the controller's)", func(t *testing.T) {
		limited := startUI(t, cluster.KubeconfigPath, "--max-objects=1", "--render-memory-bytes=268435456", "--max-previews=1")
		defer limited.stop()
		if status, body := fetch(t, limited.client, limited.url+"apps/"+ns+"/web"); status != http.StatusOK ||
			!strings.Contains(body, "rendered object count limit exceeded") {
			t.Errorf("the App page (%d) of a 2-object App under --max-objects=1 does not say the limit was exceeded:\n%s", status, body)
		}
	})

	t.Run("cross-origin posts, foreign Host names and every interface are refused", func(t *testing.T) {
		if r := w.plumb("ui", "--addr", "0.0.0.0:0"); r.code == 0 || !strings.Contains(r.stderr, "serves every interface") {
			t.Errorf("plumb ui on every interface: want a refusal\n%s", r)
		}
		if r := w.plumb("ui", "--addr", net.JoinHostPort(nonLoopbackAddress(t), "0")); r.code == 0 || !strings.Contains(r.stderr, "is not a loopback address") {
			t.Errorf("plumb ui on a non-loopback address: want a refusal\n%s", r)
		}
		for _, trusted := range []string{"127.0.0.2", "::1", "0.0.0.0/0"} {
			if r := w.plumb("ui", "--proxy", "--trusted-proxy", trusted); r.code == 0 || !strings.Contains(r.stderr, "port-forward") {
				t.Errorf("plumb ui --proxy --trusted-proxy %s (loopback: kubectl port-forward arrives from there): want a refusal\n%s", trusted, r)
			}
		}
		req, _ := http.NewRequest(http.MethodPost, appURL+"/sync", nil)
		req.Header.Set("Origin", "http://evil.example")
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		before := w.app("web").Annotations[plumbv1.AnnotationSyncRequestedAt]
		resp, err := ui.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("a cross-site post: %d, want 403", resp.StatusCode)
		}
		if after := w.app("web").Annotations[plumbv1.AnnotationSyncRequestedAt]; after != before {
			t.Errorf("the cross-site post asked for a sync: %q → %q", before, after)
		}
		req, _ = http.NewRequest(http.MethodGet, url, nil)
		req.Host = "rebound.evil.example"
		resp, err = ui.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMisdirectedRequest {
			t.Errorf("a request for Host %s: %d, want 421", req.Host, resp.StatusCode)
		}
	})
}

// patchWeb merge-patches App web of the world as its admin.
func patchWeb(t *testing.T, w *world, patch string) {
	t.Helper()
	app := w.app("web")
	if err := w.k8s.Patch(context.Background(), app, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
}

// readyMessage is the message of the App's Ready condition.
func readyMessage(app *plumbv1.App) string {
	if c := apimeta.FindStatusCondition(app.Status.Conditions, plumbv1.ConditionReady); c != nil {
		return c.Message
	}
	return ""
}

// TestTheDashboardBehindAProxy: plumb ui --proxy believes the user headers
// only on connections from the proxy's address, refuses requests without
// them and names Kubernetes reserves; a user allowed to read only
// namespace A sees no App of namespace B, in pages or in the live stream.
func TestTheDashboardBehindAProxy(t *testing.T) {
	w := newWorld(t, "cli-ui-proxy")
	a := w.ns
	commit := w.push("first", map[string]string{"web/configmap.yaml": configMap(a, "web", map[string]string{"greeting": "hello"})})
	w.createApp("web", "web", nil)
	w.waitReady("web", commit)
	ctx := context.Background()
	other := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "cli-ui-proxy-b-"}}
	if err := w.k8s.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.k8s.Delete(context.Background(), other) })
	b := other.Name
	hidden := &plumbv1.App{ObjectMeta: metav1.ObjectMeta{Namespace: b, Name: "hidden"}, Spec: plumbv1.AppSpec{Suspend: true,
		Source: plumbv1.Source{URL: "https://git.example/hidden.git", Ref: plumbv1.GitRef{Branch: "main"}}}}
	if err := w.k8s.Create(ctx, hidden); err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: a, Name: "alice"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{plumbv1.GroupVersion.Group}, Resources: []string{"apps"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"list"}},
	}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: a, Name: "alice"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "alice"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}}}
	for _, obj := range []client.Object{role, binding} {
		if err := w.k8s.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	// The dashboard runs as a ServiceAccount with the rights the chart's
	// ClusterRole gives it (charts/plumb pins the same list), no more.
	dashboardRole := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: a + "-dashboard"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"users", "groups"}, Verbs: []string{"impersonate"}},
		{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews", "selfsubjectaccessreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{plumbv1.GroupVersion.Group}, Resources: []string{"apps"}, Verbs: []string{"get", "list", "watch"}},
	}}
	dashboardBinding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: a + "-dashboard"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: dashboardRole.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: a, Name: "dashboard"}}}
	for _, obj := range []client.Object{dashboardRole, dashboardBinding} {
		if err := w.k8s.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.k8s.Delete(context.Background(), obj) })
	}
	dashboardKubeconfig := w.kubeconfigOf("dashboard")
	eventually(t, "the dashboard's ClusterRole in force", func() bool {
		return w.plumbWith(dashboardKubeconfig, "get", "apps", "-A").code == 0
	})
	// The proxy reaches the dashboard over its Unix socket; nothing else
	// can (a port-forward reaches TCP ports only).
	socket := filepath.Join(t.TempDir(), "ui.sock")
	startProxyUI(t, dashboardKubeconfig, socket, "--default-service-account", "deployer")
	const url = "http://dashboard/"
	fromProxy := &http.Client{Timeout: time.Minute, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", socket)
	}}}
	// A second dashboard on TCP knows its proxy by a shared secret: a
	// request from loopback (as kubectl port-forward into the pod makes)
	// without it is not the proxy's.
	secretFile := filepath.Join(t.TempDir(), "proxy-secret")
	const proxySecret = "the-shared-secret-of-the-proxy-0123"
	if err := os.WriteFile(secretFile, []byte(proxySecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tcpURL := startUI(t, dashboardKubeconfig, "--proxy", "--proxy-secret-file", secretFile).url
	request := func(t *testing.T, c *http.Client, path string, headers map[string]string) (int, string) {
		t.Helper()
		base := url
		if c == http.DefaultClient {
			base = tcpURL
		}
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	alice := map[string]string{"X-Forwarded-User": "alice", "X-Forwarded-Groups": "developers"}

	t.Run("only the proxy's requests with a user are served", func(t *testing.T) {
		for _, tc := range []struct {
			what    string
			client  *http.Client
			headers map[string]string
			want    int
		}{
			{"forged headers from loopback without the proxy's secret (a port-forward)", http.DefaultClient, alice, http.StatusForbidden},
			{"the proxy's secret from loopback", http.DefaultClient, map[string]string{"X-Forwarded-User": "alice", "X-Plumb-Proxy-Secret": proxySecret}, http.StatusOK},
			{"a wrong secret", http.DefaultClient, map[string]string{"X-Forwarded-User": "alice", "X-Plumb-Proxy-Secret": "guess-guess-guess-guess"}, http.StatusForbidden},
			{"the proxy's request without the user header", fromProxy, nil, http.StatusUnauthorized},
			{"the proxy's request naming system:masters", fromProxy, map[string]string{"X-Forwarded-User": "alice", "X-Forwarded-Groups": "system:masters"}, http.StatusForbidden},
			{"the proxy's request naming a system: user", fromProxy, map[string]string{"X-Forwarded-User": "system:admin"}, http.StatusForbidden},
			{"the proxy's request for alice", fromProxy, alice, http.StatusOK},
		} {
			for _, path := range []string{"", "apps/" + a + "/web", "events"} {
				if tc.want == http.StatusOK && path == "events" || tc.client == http.DefaultClient && path != "" {
					continue // a stream: read below
				}
				if status, body := request(t, tc.client, path, tc.headers); status != tc.want {
					t.Errorf("%s, /%s: %d, want %d: %s", tc.what, path, status, tc.want, body)
				}
			}
		}
	})

	t.Run("an App that acts as the controller's default ServiceAccount says it cannot be previewed here", func(t *testing.T) {
		eventually(t, "alice's Role in force", func() bool {
			status, _ := request(t, fromProxy, "apps/"+a+"/web", alice)
			return status == http.StatusOK
		})
		_, body := request(t, fromProxy, "apps/"+a+"/web", alice)
		if !strings.Contains(body, "acts as ServiceAccount "+a+"/deployer (the controller&#39;s --default-service-account") ||
			!strings.Contains(body, "cannot be previewed as that ServiceAccount") {
			t.Errorf("alice's App page of %s/web, which acts as the default ServiceAccount deployer, does not say it cannot be previewed as it:\n%s", a, body)
		}
	})

	t.Run("a user of namespace A sees nothing of namespace B", func(t *testing.T) {
		eventually(t, "alice's Role in force", func() bool {
			status, _ := request(t, fromProxy, "apps/"+a+"/web", alice)
			return status == http.StatusOK
		})
		status, body := request(t, fromProxy, "", alice)
		if status != http.StatusOK || !strings.Contains(body, "app-"+a+"_web") || strings.Contains(body, b) {
			t.Errorf("alice's Apps page (%d) must list %s/web and nothing of %s:\n%s", status, a, b, body)
		}
		if status, body := request(t, fromProxy, "apps/"+b+"/hidden", alice); status != http.StatusForbidden || !strings.Contains(body, "Your Kubernetes rights do not let you read App "+b+"/hidden") {
			t.Errorf("alice's App page of %s/hidden: %d, want 403 and a refusal:\n%s", b, status, body)
		}
		if _, body := request(t, fromProxy, "?namespace="+b, alice); !strings.Contains(body, "could not be listed with your rights") {
			t.Errorf("alice's Apps page of namespace %s says no refusal:\n%s", b, body)
		}
		s := readStreamWith(t, fromProxy, url+"events", alice)
		s.until(t, "event: snapshot")
		// A change in B, then one in A: the stream's one watch delivers them
		// in order, so once A's arrives, B's would have.
		for _, change := range []struct {
			key   types.NamespacedName
			patch string
		}{{types.NamespacedName{Namespace: b, Name: "hidden"}, `{"metadata":{"annotations":{"test/touched":"yes"}}}`},
			{types.NamespacedName{Namespace: a, Name: "web"}, `{"spec":{"suspend":true}}`}} {
			app := &plumbv1.App{}
			app.Namespace, app.Name = change.key.Namespace, change.key.Name
			if err := w.k8s.Patch(ctx, app, client.RawPatch(types.MergePatchType, []byte(change.patch))); err != nil {
				t.Fatal(err)
			}
		}
		got := s.until(t, `"suspended":true`)
		if !strings.Contains(got, `"namespace":"`+a+`"`) || strings.Contains(got, b) {
			t.Errorf("alice's stream must carry %s's App and nothing of %s:\n%s", a, b, got)
		}
	})
}

// nonLoopbackAddress is an address of this machine that is not loopback.
func nonLoopbackAddress(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if ip, ok := a.(*net.IPNet); ok && !ip.IP.IsLoopback() && ip.IP.To4() != nil {
			return ip.IP.String()
		}
	}
	t.Fatalf("this machine has no non-loopback IPv4 address to check that plumb ui refuses one (addresses: %v)", addrs)
	return ""
}
