package main

import (
	"bufio"
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

var update = flag.Bool("update", false, "rewrite the golden files of the operator's commands")

// normalizers make the operator commands' output reproducible: ages,
// commits, the Git server's port and sync-request times vary by run; runs
// of spaces after a word (a table's padding, which follows the widths of
// those) are made one tab.
var normalizers = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`sha1:[0-9a-f]{7,40}`), "sha1:SHA"}, // before ages: a short commit may end in 6d
	{regexp.MustCompile(`\b\d+(\.\d+)?(ms|s|m|h|d|y)(\d+(s|m|h))?\b`), "AGE"},
	{regexp.MustCompile(`http://127\.0\.0\.1:\d+`), "http://GIT"},
	{regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`), "TIME"},
	{regexp.MustCompile(`([^\s│]) {2,}`), "$1\t"},
}

// normalize makes output reproducible; ns, the test's namespace, becomes
// NS.
func normalize(s, ns string) string {
	s = strings.ReplaceAll(s, ns, "NS")
	for _, n := range normalizers {
		s = n.re.ReplaceAllString(s, n.with)
	}
	return s
}

// golden compares normalised output with testdata/<name>.golden (written
// with -update).
func (w *world) golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	got = normalize(got, w.ns)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test ./cmd/plumb -run %s -update writes it)", err, t.Name())
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s differs from %s (-want +got):\n%s", name, path, diff)
	}
}

func TestOperatorCommands(t *testing.T) {
	w := newWorld(t, "cli-ops")
	ns := w.ns
	first := w.push("first", map[string]string{
		"web/configmap.yaml": configMap(ns, "web", map[string]string{"greeting": "hello"}),
		"web/service.yaml":   service(ns, "web", 80),
	})
	w.createApp("web", "web", func(app *plumbv1.App) { app.Spec.DriftPolicy = plumbv1.DriftPolicyAlert })
	w.waitReady("web", first)

	t.Run("sync --wait returns after the controller handled that request, with the change set", func(t *testing.T) {
		second := w.push("second", map[string]string{
			"web/configmap.yaml": configMap(ns, "web", map[string]string{"greeting": "bonjour"}),
			"web/extra.yaml":     configMap(ns, "extra", map[string]string{"more": "yes"}),
		})
		r := w.plumb("sync", "web", "-n", ns, "--wait")
		if r.code != 0 {
			t.Fatalf("plumb sync --wait:\n%s", r)
		}
		w.golden(t, "sync-changed", r.stdout)
		app := w.app("web")
		if app.Status.LastAppliedRevision != "main@sha1:"+second || app.Status.LastChangeSet == nil ||
			app.Status.LastChangeSet.SyncRequest != app.Status.LastHandledSyncRequest {
			t.Errorf("after plumb sync --wait the App is at %s with change set %+v, want main@sha1:%s answering %s",
				app.Status.LastAppliedRevision, app.Status.LastChangeSet, second, app.Status.LastHandledSyncRequest)
		}
		if !strings.Contains(r.stderr, "Waiting for the controller to handle the sync of App "+ns+"/web (request "+app.Status.LastHandledSyncRequest+")") {
			t.Errorf("plumb sync did not name the request the App's status says it handled (%s):\n%s", app.Status.LastHandledSyncRequest, r)
		}
		again := w.plumb("sync", "web", "-n", ns, "--wait")
		if again.code != 0 {
			t.Fatalf("plumb sync --wait:\n%s", again)
		}
		w.golden(t, "sync-unchanged", again.stdout)
	})

	t.Run("a failing tick: non-zero exit naming the phase", func(t *testing.T) {
		w.push("broken", map[string]string{"web/broken.yaml": "kind: [not, yaml\n"})
		r := w.plumb("sync", "web", "-n", ns, "--wait")
		if r.code != 1 || !strings.Contains(r.stderr, "Error: the tick did not converge the App: read phase failed") ||
			!strings.Contains(r.stderr, "(phase read, reason ReadFailed)") {
			t.Errorf("want exit 1 naming the Read phase:\n%s", r)
		}
		table := w.plumb("get", "apps", "-n", ns)
		w.golden(t, "get-apps-failing", table.stdout)
		fixed := w.push("fixed", map[string]string{"web/broken.yaml": ""})
		if r := w.plumb("sync", "web", "-n", ns, "--wait"); r.code != 0 {
			t.Fatalf("plumb sync --wait after the fix:\n%s", r)
		}
		w.waitReady("web", fixed)
	})

	t.Run("get and tree show drift with who changed it", func(t *testing.T) {
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"})
		live.SetNamespace(ns)
		live.SetName("web")
		patch := client.RawPatch(types.MergePatchType, []byte(`{"data":{"greeting":"hacked"}}`))
		if err := w.k8s.Patch(context.Background(), live, patch, client.FieldOwner("kubectl-edit")); err != nil {
			t.Fatal(err)
		}
		w.waitFor("web", "drift reported", func(app *plumbv1.App) bool { return app.Status.Drift != nil && app.Status.Drift.Count == 1 })
		// The drift episode's Event, which plumb get app lists, is written
		// apart from the status.
		eventually(t, "the DriftDetected Event", func() bool {
			events := &corev1.EventList{}
			if err := w.k8s.List(context.Background(), events, client.InNamespace(ns)); err != nil {
				return false
			}
			for _, e := range events.Items {
				if e.Reason == "DriftDetected" && e.InvolvedObject.Name == "web" {
					return true
				}
			}
			return false
		})
		w.golden(t, "get-apps", w.plumb("get", "apps", "-n", ns).stdout)
		w.golden(t, "get-apps-wide", w.plumb("get", "apps", "-n", ns, "-o", "wide").stdout)
		w.golden(t, "tree", w.plumb("tree", "web", "-n", ns).stdout)
		detail := w.plumb("get", "app", "web", "-n", ns)
		if detail.code != 0 {
			t.Fatalf("plumb get app:\n%s", detail)
		}
		before, events, found := strings.Cut(detail.stdout, "\nEvents:\n")
		if !found {
			t.Fatalf("plumb get app shows no events:\n%s", detail)
		}
		w.golden(t, "get-app", before)
		for _, reason := range []string{"Applied", "DriftDetected", "ReadFailed"} {
			if !strings.Contains(events, reason) {
				t.Errorf("plumb get app's events lack %s:\n%s", reason, events)
			}
		}
		all := w.plumb("get", "apps", "-A")
		if all.code != 0 || !strings.Contains(all.stdout, "NAMESPACE") || !strings.Contains(all.stdout, ns) {
			t.Errorf("plumb get apps -A:\n%s", all)
		}
	})

	t.Run("suspend, a sync of a suspended App, resume", func(t *testing.T) {
		r := w.plumb("suspend", "web", "-n", ns)
		if r.code != 0 {
			t.Fatalf("plumb suspend:\n%s", r)
		}
		w.golden(t, "suspend", r.stdout)
		if !w.app("web").Spec.Suspend {
			t.Error("plumb suspend did not suspend the App")
		}
		refused := w.plumb("sync", "web", "-n", ns, "--wait")
		if refused.code != 1 || !strings.Contains(refused.stderr, "Error: App "+ns+"/web is suspended") {
			t.Errorf("want a sync of a suspended App refused:\n%s", refused)
		}
		resumed := w.plumb("resume", "web", "-n", ns, "--wait")
		if resumed.code != 0 {
			t.Fatalf("plumb resume --wait:\n%s", resumed)
		}
		w.golden(t, "resume", resumed.stdout)
		if w.app("web").Spec.Suspend {
			t.Error("plumb resume did not resume the App")
		}
	})

	t.Run("shell completion offers the namespace's Apps", func(t *testing.T) {
		script, err := exec.Command(plumbBinary, "completion", "bash").Output()
		if err != nil || !strings.Contains(string(script), "__start_plumb") {
			t.Errorf("plumb completion bash: %v\n%s", err, script)
		}
		// What the completion scripts run to complete a command's argument
		// (the word to complete comes last).
		out, err := exec.Command(plumbBinary, "__complete", "diff", "--kubeconfig", cluster.KubeconfigPath, "-n", ns, "").Output()
		if err != nil || strings.Split(string(out), "\n")[0] != "web" {
			t.Errorf("completing plumb diff's App: %v\n%s", err, out)
		}
	})

	t.Run("get apps --watch prints a row when an App changes", func(t *testing.T) {
		cmd := exec.Command(plumbBinary, "get", "apps", "-n", ns, "--watch", "--kubeconfig", cluster.KubeconfigPath)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		lines := make(chan string, 100)
		go func() {
			scanner := bufio.NewScanner(stdout)
			for scanner.Scan() {
				lines <- scanner.Text()
			}
			close(lines)
		}()
		expect := func(what string, match func(string) bool) {
			t.Helper()
			deadline := time.After(time.Minute)
			for {
				select {
				case line, ok := <-lines:
					if !ok {
						t.Fatalf("plumb get apps --watch ended before %s", what)
					}
					if match(line) {
						return
					}
				case <-deadline:
					t.Fatalf("plumb get apps --watch printed no %s within a minute", what)
				}
			}
		}
		expect("row of App web", func(l string) bool { return strings.HasPrefix(l, "web ") })
		w.createApp("later", "web", func(app *plumbv1.App) { app.Labels = nil })
		expect("row of the new App", func(l string) bool { return strings.HasPrefix(l, "later ") })
	})
}
