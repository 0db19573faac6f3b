// Package e2e holds end-to-end tests: they run plumb's commands as a user
// would, against a real local control plane.
package e2e

import (
	"bufio"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// sessionClient is an HTTP client that keeps cookies: the dashboard's URL
// holds a session token, which it trades for a cookie.
func sessionClient() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, Timeout: time.Minute}
}

// buildCommand compiles one of the repository's main packages for the test.
func buildCommand(t *testing.T, pkg string) string {
	t.Helper()
	binary := filepath.Join(t.TempDir(), filepath.Base(pkg))
	if out, err := exec.Command("go", "build", "-o", binary, pkg).CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return binary
}

// TestDemoGivesAWorkingKubeconfigAndStopsCleanlyOnCtrlC runs what `make demo`
// runs, uses the kubeconfig it prints with kubectl, then presses Ctrl-C.
func TestDemoGivesAWorkingKubeconfigAndStopsCleanlyOnCtrlC(t *testing.T) {
	demo := exec.Command(buildCommand(t, "github.com/plumb-dev/plumb/hack/demo"))
	stdout, err := demo.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	demo.Stderr = &stderr
	if err := demo.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = demo.Process.Kill() })

	// Read the narrative until "Ready", in the background, with a deadline.
	type narrative struct{ kubeconfig, path, dashboard string }
	ready := make(chan narrative, 1)
	rest := make(chan []string, 1)
	go func() {
		var got narrative
		var lines []string
		scanner := bufio.NewScanner(stdout)
		for scanner.Scan() {
			line := scanner.Text()
			lines = append(lines, line)
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "export KUBECONFIG="); ok {
				got.kubeconfig = v
			}
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "export PATH="); ok {
				got.path = strings.TrimSuffix(v, ":$PATH")
			}
			if _, v, ok := strings.Cut(line, "Serving the dashboard at "); ok {
				got.dashboard = strings.Fields(v)[0]
			}
			if strings.HasSuffix(line, "] Ready") {
				ready <- got
			}
		}
		rest <- lines
	}()
	var got narrative
	select {
	case got = <-ready:
	case lines := <-rest:
		t.Fatalf("demo ended before Ready:\n%s\nstderr:\n%s", strings.Join(lines, "\n"), stderr.String())
	case <-time.After(3 * time.Minute):
		t.Fatalf("demo not Ready within 3 minutes; stderr:\n%s", stderr.String())
	}
	if got.kubeconfig == "" || got.path == "" {
		t.Fatalf("demo did not print the KUBECONFIG and PATH exports: %+v", got)
	}

	// The binaries the demo's PATH export names, found there alone.
	inPath := func(name string) string {
		t.Helper()
		for _, dir := range filepath.SplitList(got.path) {
			if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
				return filepath.Join(dir, name)
			}
		}
		t.Fatalf("%s is in none of the folders of the demo's PATH export %s", name, got.path)
		return ""
	}
	kubectl := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(inPath("kubectl"), args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+got.kubeconfig)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if out := kubectl("get", "crd", "apps.plumb.dev", "-o", "name"); out != "customresourcedefinition.apiextensions.k8s.io/apps.plumb.dev" {
		t.Errorf("kubectl get crd apps.plumb.dev = %q", out)
	}
	if out := kubectl("get", "nodes", "-o", `jsonpath={.items[*].status.conditions[?(@.type=="Ready")].status}`); out != "True" {
		t.Errorf("node Ready = %q, want True", out)
	}
	if out := kubectl("get", "app", "shop", "-n", "default", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`); out != "True" {
		t.Errorf("the demo's App shop is Ready=%q, want True", out)
	}
	// The PATH the demo prints holds plumb's CLI too.
	plumb := exec.Command(inPath("plumb"), "get", "apps", "-A")
	plumb.Env = append(os.Environ(), "KUBECONFIG="+got.kubeconfig)
	if out, err := plumb.CombinedOutput(); err != nil || !strings.Contains(string(out), "shop") {
		t.Errorf("plumb get apps -A with the demo's exports: %v\n%s", err, out)
	}

	// The dashboard the demo prints serves the App.
	if got.dashboard == "" {
		t.Error("the demo printed no dashboard URL")
	} else if resp, err := sessionClient().Get(got.dashboard); err != nil {
		t.Errorf("the demo's dashboard %s: %v", got.dashboard, err)
	} else {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `id="app-default_shop"`) {
			t.Errorf("the demo's dashboard %s: %s, want the App shop listed:\n%s", got.dashboard, resp.Status, body)
		}
	}

	if err := demo.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	var lines []string
	select {
	case lines = <-rest:
	case <-time.After(time.Minute):
		t.Fatal("demo did not stop within a minute of Ctrl-C")
	}
	if err := demo.Wait(); err != nil {
		t.Errorf("demo exited with %v after Ctrl-C, want 0; stderr:\n%s", err, stderr.String())
	}
	if last := lines[len(lines)-1]; !strings.HasSuffix(last, "] Stopped") {
		t.Errorf("demo's last line = %q, want Stopped", last)
	}
	if _, err := os.Stat(got.kubeconfig); !os.IsNotExist(err) {
		t.Errorf("the demo's folder %s outlived it (stat: %v)", filepath.Dir(got.kubeconfig), err)
	}
}

// TestDemoExitRunsTheWholeNarrative runs `DEMO_EXIT=1 make demo`'s program:
// it must converge every step and exit 0.
func TestDemoExitRunsTheWholeNarrative(t *testing.T) {
	demo := exec.Command(buildCommand(t, "github.com/plumb-dev/plumb/hack/demo"))
	demo.Env = append(os.Environ(), "DEMO_EXIT=1")
	var stdout, stderr strings.Builder
	demo.Stdout, demo.Stderr = &stdout, &stderr
	done := make(chan error, 1)
	if err := demo.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- demo.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("DEMO_EXIT=1 demo: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
		}
	case <-time.After(5 * time.Minute):
		_ = demo.Process.Kill()
		t.Fatalf("the demo did not finish within 5 minutes:\n%s", stdout.String())
	}
	for _, step := range []string{"Applied R1", "Available with 2/2 replicas", "Healthy=True (all 5 objects are Current)", "delivered a signed GitHub push webhook", "Converged to R2",
		"Healed the drift", "DriftDetected notification reached the receiver, signature valid: ConfigMap shop/settings .data.color green→hand-edited by kubectl-edit (Update",
		"Then DriftResolved", "Pruned ConfigMap shop/banner",
		"Ready=False HealthCheckFailed", "not healthy after 20s: Deployment.apps/shop/web InProgress", "Ready again at R5",
		"$ plumb get apps -A", "$ plumb suspend shop -n default", "Suspended App default/shop",
		"! ConfigMap/shop/settings (drifted by kubectl-edit; the App is suspended: put back once it is resumed)", ".data.color: green → hotfix, by kubectl-edit (Update)",
		"~ ConfigMap/shop/settings (updated)", "+  incident: INC-42", "Summary: 1 to update; 3 unchanged (working-copy)",
		"Changed 1 object: 0 created, 1 configured, 0 deleted", "configured  ConfigMap/shop/settings", "App default/shop is Ready at main@sha1:",
		"settings  synced  Current",
		"] Ready", "] Stopped"} {
		if !strings.Contains(stdout.String(), step) {
			t.Errorf("the narrative lacks %q:\n%s", step, stdout.String())
		}
	}
}
