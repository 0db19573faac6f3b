package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/api/v1alpha1/crd"
	"github.com/plumb-dev/plumb/internal/source/git/gittest"
	"github.com/plumb-dev/plumb/internal/syncrequest"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// webhookSecret signs the GitHub pushes the bench sends.
const webhookSecret = "bench-webhook-secret"

// world is what every scenario runs against: one local control plane, one
// Git server, plumb's binary, and an admin client.
type world struct {
	cluster *testenv.Cluster
	git     *gittest.Server
	k8s     client.Client
	plumb   string // the plumb binary
	dir     string // scratch folder (controller logs and Git caches)
	// serverPIDs are etcd's and kube-apiserver's.
	serverPIDs []int
	repos      int
}

// newWorld starts the control plane and the Git server and builds plumb.
func newWorld(ctx context.Context, logf func(string, ...any)) (_ *world, err error) {
	ctrllog.SetLogger(logr.Discard()) // the bench's own clients need no runtime logs
	w := &world{}
	defer func() {
		if err != nil {
			w.close()
		}
	}()
	if w.dir, err = os.MkdirTemp("", "plumb-bench-"); err != nil {
		return nil, err
	}
	logf("Building plumb")
	if w.plumb, err = buildPlumb(w.dir); err != nil {
		return nil, err
	}
	logf("Starting the local control plane (etcd and kube-apiserver)")
	if w.cluster, err = testenv.Start(ctx, testenv.Options{Mode: testenv.ModeAPI}); err != nil {
		return nil, err
	}
	pids, err := w.cluster.PIDs()
	if err != nil {
		return nil, err
	}
	for _, name := range []string{"etcd", "kube-apiserver"} {
		if pids[name] == 0 {
			return nil, fmt.Errorf("no %s process found for the cluster in %s", name, w.cluster.Dir)
		}
		w.serverPIDs = append(w.serverPIDs, pids[name])
	}
	if err := crd.Install(ctx, w.cluster.Config); err != nil {
		return nil, fmt.Errorf("installing the App CRD: %w", err)
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = plumbv1.AddToScheme(scheme)
	if w.k8s, err = client.New(w.cluster.Config, client.Options{Scheme: scheme}); err != nil {
		return nil, err
	}
	if w.git, err = gittest.Start(); err != nil {
		return nil, err
	}
	return w, nil
}

func (w *world) close() {
	if w.git != nil {
		w.git.Stop()
	}
	if w.cluster != nil {
		_ = w.cluster.Stop()
	}
	if w.dir != "" {
		_ = os.RemoveAll(w.dir)
	}
}

// startController runs a fresh plumb controller process.
func (w *world) startController(ctx context.Context, name string, extra ...string) (*controllerProcess, error) {
	return startController(ctx, w.plumb, w.cluster.KubeconfigPath, filepath.Join(w.dir, name), webhookSecret, extra...)
}

// repo is a Git repository the bench pushes to.
type repo struct {
	name string
	work *gittest.Workdir
	url  string
}

// newRepo creates a repository holding files under deploy/.
func (w *world) newRepo(files map[string]string) (*repo, string, error) {
	w.repos++
	name := fmt.Sprintf("bench-%d.git", w.repos)
	work, err := w.git.NewWorkdir(name)
	if err != nil {
		return nil, "", err
	}
	r := &repo{name: name, work: work, url: w.git.HTTPURL(name)}
	hash, err := r.push(files)
	return r, hash, err
}

// push commits files (paths under deploy/; empty content deletes) and
// pushes main.
func (r *repo) push(files map[string]string) (string, error) {
	prefixed := map[string]string{}
	for path, content := range files {
		prefixed["deploy/"+path] = content
	}
	hash, err := r.work.Commit("bench", prefixed)
	if err != nil {
		return "", err
	}
	return hash, r.work.Push("main")
}

// configMaps renders n ConfigMaps cm-0000… whose value is value(i), each
// with a payload of about payloadBytes, one file each.
func configMaps(n, payloadBytes int, value func(i int) string) map[string]string {
	payload := strings.Repeat("x", payloadBytes)
	files := map[string]string{}
	for i := range n {
		files[fmt.Sprintf("cm-%04d.yaml", i)] = fmt.Sprintf(
			"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-%04d\ndata:\n  value: %q\n  payload: %q\n", i, value(i), payload)
	}
	return files
}

// newNamespace creates a namespace for one scenario.
func (w *world) newNamespace(ctx context.Context, prefix string) (string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := w.k8s.Create(ctx, ns); err != nil {
		return "", err
	}
	return ns.Name, nil
}

// createApp creates an App named name in ns that reads r's deploy/ folder
// with credentials, every interval; mutate changes the App before.
func (w *world) createApp(ctx context.Context, ns, name string, r *repo, interval time.Duration, mutate ...func(*plumbv1.App)) error {
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-git"},
		StringData: map[string]string{"username": gittest.Username, "password": gittest.Password},
	}
	if err := w.k8s.Create(ctx, secret); err != nil {
		return err
	}
	app := &plumbv1.App{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: plumbv1.AppSpec{
			Source: plumbv1.Source{
				URL: r.url, Ref: plumbv1.GitRef{Branch: "main"}, Path: "deploy",
				SecretRef: &plumbv1.LocalObjectReference{Name: secret.Name},
			},
			Interval: &metav1.Duration{Duration: interval},
		},
	}
	for _, m := range mutate {
		m(app)
	}
	return w.k8s.Create(ctx, app)
}

// readyAt waits until the App is Ready at the commit hash.
func (w *world) readyAt(ctx context.Context, ns, name, hash string, timeout time.Duration) error {
	last := "not read yet"
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		app := &plumbv1.App{}
		if err := w.k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, app); err != nil {
			last = err.Error()
			return false, nil
		}
		cond := apimeta.FindStatusCondition(app.Status.Conditions, plumbv1.ConditionReady)
		if cond == nil {
			last = "no Ready condition"
			return false, nil
		}
		last = fmt.Sprintf("Ready=%s %s: %s (revision %s)", cond.Status, cond.Reason, cond.Message, app.Status.LastAppliedRevision)
		return cond.Status == metav1.ConditionTrue && strings.HasSuffix(app.Status.LastAppliedRevision, hash), nil
	})
	if err != nil {
		return fmt.Errorf("App %s/%s not Ready at %s: %w; last: %s", ns, name, hash, err, last)
	}
	return nil
}

// requestSync asks for the App's next tick now, as a webhook or `plumb
// sync` does (the sync annotation).
func (w *world) requestSync(ctx context.Context, ns, name string) error {
	return syncrequest.Annotate(ctx, w.k8s, client.ObjectKey{Namespace: ns, Name: name}, time.Now(), plumbv1.SyncRequestedByManual)
}

// clientOptions are the options of a client that knows plumb's types.
func (w *world) clientOptions() client.Options {
	return client.Options{Scheme: w.k8s.Scheme()}
}
