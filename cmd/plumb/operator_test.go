package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/source/git/gittest"
	"github.com/plumb-dev/plumb/internal/syncrequest"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// world is one operator test's namespace, repository and controller: the
// built plumb binary runs `plumb controller` against the package's local
// control plane, ticking only the test's Apps, and the test runs the
// operator's commands beside it.
type world struct {
	t    *testing.T
	ns   string
	k8s  client.Client
	repo *gittest.Workdir
	url  string
	log  string
	// controller is the controller's process.
	controller *os.Process
}

// newWorld makes the namespace (prefix and a random suffix) and the
// repository of a test and starts a controller for its Apps (labelled
// plumb-test=<namespace>), with controllerArgs added to its flags.
func newWorld(t *testing.T, prefix string, controllerArgs ...string) *world {
	t.Helper()
	ns := prefix + "-" + rand.String(5)
	k8s := cluster.Client(t)
	if err := k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	credentials := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "git-credentials"},
		StringData: map[string]string{"username": gittest.Username, "password": gittest.Password}}
	if err := k8s.Create(context.Background(), credentials); err != nil {
		t.Fatal(err)
	}
	repo, err := gitServer.NewWorkdir(ns)
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, ns: ns, k8s: k8s, repo: repo, url: gitServer.HTTPURL(ns)}
	w.startController(controllerArgs...)
	return w
}

// startController runs plumb controller for the world's Apps until the
// test ends.
func (w *world) startController(extra ...string) {
	t := w.t
	dir := t.TempDir()
	w.log = filepath.Join(dir, "controller.log")
	logFile, err := os.Create(w.log)
	if err != nil {
		t.Fatal(err)
	}
	addrs := testenv.FreeAddrsForTest(t, 2)
	cmd := exec.Command(plumbBinary, "controller", "--kubeconfig", cluster.KubeconfigPath,
		"--health-addr", addrs[0], "--metrics-addr", addrs[1], "--leader-elect=false",
		"--app-label-selector", "plumb-test="+w.ns, "--git-cache-dir", filepath.Join(dir, "git"),
		"--log-level", "debug", "--log-encoding", "console")
	cmd.Args = append(cmd.Args, extra...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.controller = cmd.Process
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logFile.Close(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			data, _ := os.ReadFile(w.log)
			lines := strings.Split(string(data), "\n")
			if len(lines) > 60 {
				lines = lines[len(lines)-60:]
			}
			t.Logf("the controller's log:\n%s", strings.Join(lines, "\n"))
		}
	})
}

// push commits files (path → content; "" removes the file) and pushes
// them; it returns the commit.
func (w *world) push(message string, files map[string]string) string {
	w.t.Helper()
	commit, err := w.repo.Commit(message, files)
	if err != nil {
		w.t.Fatal(err)
	}
	if err := w.repo.Push("main"); err != nil {
		w.t.Fatal(err)
	}
	return commit
}

// createApp creates an App of the folder path, read with the world's
// credentials Secret, with a 10-minute interval
// (only the test's sync requests tick it after its first tick).
func (w *world) createApp(name, path string, edit func(*plumbv1.App)) {
	w.t.Helper()
	app := &plumbv1.App{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name, Labels: map[string]string{"plumb-test": w.ns}},
		Spec: plumbv1.AppSpec{
			Source: plumbv1.Source{URL: w.url, Ref: plumbv1.GitRef{Branch: "main"}, Path: path,
				SecretRef: &plumbv1.LocalObjectReference{Name: "git-credentials"}},
			Interval: &metav1.Duration{Duration: 10 * time.Minute},
		},
	}
	if edit != nil {
		edit(app)
	}
	if err := w.k8s.Create(context.Background(), app); err != nil {
		w.t.Fatal(err)
	}
}

// app reads an App.
func (w *world) app(name string) *plumbv1.App {
	w.t.Helper()
	app := &plumbv1.App{}
	if err := w.k8s.Get(context.Background(), types.NamespacedName{Namespace: w.ns, Name: name}, app); err != nil {
		w.t.Fatal(err)
	}
	return app
}

// waitFor polls the App until cond holds (one minute at most).
func (w *world) waitFor(name, what string, cond func(*plumbv1.App) bool) *plumbv1.App {
	w.t.Helper()
	var last *plumbv1.App
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		app := &plumbv1.App{}
		if err := w.k8s.Get(ctx, types.NamespacedName{Namespace: w.ns, Name: name}, app); err != nil {
			return false, nil
		}
		last = app
		return cond(app), nil
	})
	if err != nil {
		var ready *metav1.Condition
		if last != nil {
			ready = apimeta.FindStatusCondition(last.Status.Conditions, plumbv1.ConditionReady)
		}
		w.t.Fatalf("App %s/%s: %s: never (Ready: %+v)", w.ns, name, what, ready)
	}
	return last
}

// waitReady waits until the App is Ready at the repository's head.
func (w *world) waitReady(name, commit string) *plumbv1.App {
	w.t.Helper()
	return w.waitFor(name, "Ready at "+commit, func(app *plumbv1.App) bool {
		return apimeta.IsStatusConditionTrue(app.Status.Conditions, plumbv1.ConditionReady) &&
			app.Status.LastAppliedRevision == "main@sha1:"+commit
	})
}

// tick asks the controller for a sync of the App, as `plumb sync` does,
// and waits until it handled it and is Ready at commit.
func (w *world) tick(name, commit string) *plumbv1.App {
	w.t.Helper()
	key := types.NamespacedName{Namespace: w.ns, Name: name}
	at := time.Now()
	if err := syncrequest.Annotate(context.Background(), w.k8s, key, at, plumbv1.SyncRequestedByManual); err != nil {
		w.t.Fatal(err)
	}
	request := at.UTC().Format(time.RFC3339Nano)
	w.waitFor(name, "sync request "+request+" handled", func(app *plumbv1.App) bool {
		return app.Status.LastHandledSyncRequest == request
	})
	return w.waitReady(name, commit)
}

// kubeconfigOf writes a kubeconfig that authenticates as the
// ServiceAccount name of the world's namespace (a token of the
// TokenRequest API): a user with only the rights RBAC grants it.
func (w *world) kubeconfigOf(name string) string {
	w.t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name}}
	if err := w.k8s.Create(ctx, sa); err != nil {
		w.t.Fatal(err)
	}
	request := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{}}
	if err := w.k8s.SubResource("token").Create(ctx, sa, request); err != nil {
		w.t.Fatalf("a token of ServiceAccount %s: %v", name, err)
	}
	path := filepath.Join(w.t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"local": {Server: cluster.Config.Host, CertificateAuthorityData: cluster.Config.CAData}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{name: {Token: request.Status.Token}},
		Contexts:       map[string]*clientcmdapi.Context{name: {Cluster: "local", AuthInfo: name}},
		CurrentContext: name,
	}, path); err != nil {
		w.t.Fatal(err)
	}
	return path
}

// eventually polls cond until it holds (one minute at most).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("%s: not within a minute", what)
	}
}

// run is one run of the plumb binary: what it printed and its exit code.
type run struct {
	stdout, stderr string
	code           int
}

// plumb runs the built plumb binary with the package cluster's kubeconfig.
func (w *world) plumb(args ...string) run {
	w.t.Helper()
	return w.plumbWith(cluster.KubeconfigPath, args...)
}

// plumbWith runs the built plumb binary with kubeconfig.
func (w *world) plumbWith(kubeconfig string, args ...string) run {
	w.t.Helper()
	cmd := exec.Command(plumbBinary, append(args, "--kubeconfig", kubeconfig)...)
	cmd.Env = append(os.Environ(), "XDG_CACHE_HOME="+filepath.Join(w.t.TempDir(), "cache"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := run{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		w.t.Fatalf("running plumb %s: %v", strings.Join(args, " "), err)
	}
	return r
}

func (r run) String() string {
	return fmt.Sprintf("exit %d\n--- stdout\n%s--- stderr\n%s", r.code, r.stdout, r.stderr)
}
