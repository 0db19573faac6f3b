package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/api/v1alpha1/crd"
	"github.com/plumb-dev/plumb/internal/source/git/gittest"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// The package's shared parts, started once in TestMain: a full local
// control plane, a Git server, and plumb's controller running as its own
// process, exactly as a user runs it.
var (
	cluster    *testenv.Cluster
	gitServer  *gittest.Server
	k8s        client.Client
	plumbBin   string
	controller *controllerProcess
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	ctrllog.SetLogger(logr.Discard()) // the test's own clients need no runtime logs
	binDir, err := os.MkdirTemp("", "plumb-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(binDir)
	plumbBin = filepath.Join(binDir, "plumb")
	if out, err := exec.Command("go", "build", "-o", plumbBin, "github.com/plumb-dev/plumb/cmd/plumb").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: building plumb: %v\n%s", err, out)
		return 1
	}
	return testenv.Run(testRun{m}, testenv.Needs{Git: true}, func(e *testenv.Env) { gitServer = e.Git })
}

// testRun runs the tests, prints the controller's and the control plane's
// logs when one failed, and stops what setUp started.
type testRun struct{ m *testing.M }

func (r testRun) Run() int {
	code := r.m.Run()
	if code != 0 {
		if controller != nil {
			fmt.Fprintf(os.Stderr, "----- last 300 lines of the controller's log -----\n%s", controller.tail(300))
		}
		if cluster != nil {
			cluster.WriteLogs(os.Stderr, 100)
		}
	}
	tearDown()
	return code
}

// setUp starts the control plane and the controller on first use, so that
// tests that need neither (the demo's) do not pay for them.
func setUp(t *testing.T) {
	t.Helper()
	if cluster != nil {
		return
	}
	c, err := testenv.Start(context.Background(), testenv.Options{Mode: testenv.ModeFull})
	if err != nil {
		t.Fatalf("starting the local control plane: %v", err)
	}
	cluster = c
	if err := crd.Install(context.Background(), c.Config); err != nil {
		t.Fatalf("installing the CRD: %v", err)
	}
	k8s = c.Client(t)
	controller = startController(t, "main", "--leader-elect=false", "--allow-insecure-registries",
		"--app-label-selector=e2e-shard notin (rbac,leader,outage,tenancy,health,handover,restart,shards,modes,remote)")
}

func tearDown() {
	if controller != nil {
		controller.stop()
	}
	if cluster != nil {
		_ = cluster.Stop()
	}
}

// newNamespace makes a namespace for one test.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-"}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// eventually polls cond until it returns true, failing the test with the
// last reason after timeout.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	last := ""
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		ok, why := cond()
		last = why
		return ok, nil
	})
	if err != nil {
		t.Fatalf("timed out after %s waiting for %s; last: %s", timeout, what, last)
	}
}

// getApp reads an App.
func getApp(t *testing.T, ns, name string) *plumbv1.App {
	t.Helper()
	app := &plumbv1.App{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, app); err != nil {
		t.Fatalf("reading App %s/%s: %v", ns, name, err)
	}
	return app
}

// waitReady waits until the App's Ready condition satisfies want.
func waitReady(t *testing.T, ns, name, what string, want func(*plumbv1.App, *metav1.Condition) bool) *plumbv1.App {
	t.Helper()
	var app *plumbv1.App
	eventually(t, 90*time.Second, "App "+name+" "+what, func() (bool, string) {
		app = getApp(t, ns, name)
		cond := apimeta.FindStatusCondition(app.Status.Conditions, plumbv1.ConditionReady)
		if cond == nil {
			return false, "no Ready condition"
		}
		return want(app, cond), fmt.Sprintf("Ready=%s %s: %s (revision %s)", cond.Status, cond.Reason, cond.Message, app.Status.LastAppliedRevision)
	})
	return app
}

// readyAt waits until the App is Ready at the revision whose commit is hash.
func readyAt(t *testing.T, ns, name, hash string) *plumbv1.App {
	t.Helper()
	return waitReady(t, ns, name, "Ready at "+hash, func(app *plumbv1.App, cond *metav1.Condition) bool {
		return cond.Status == metav1.ConditionTrue && strings.HasSuffix(app.Status.LastAppliedRevision, hash)
	})
}

// notReady waits until the App's Ready condition is False with reason.
func notReady(t *testing.T, ns, name, reason string) *plumbv1.App {
	t.Helper()
	return waitReady(t, ns, name, "Ready=False "+reason, func(_ *plumbv1.App, cond *metav1.Condition) bool {
		return cond.Status == metav1.ConditionFalse && cond.Reason == reason
	})
}
