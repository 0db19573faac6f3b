package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/plumb-dev/plumb/internal/source/git/gittest"
	"github.com/plumb-dev/plumb/internal/testenv"
)

var (
	// cluster is the package's local control plane, started once in TestMain.
	cluster *testenv.Cluster
	// plumbBinary is plumb built with version and commit stamped in.
	plumbBinary string
	// gitServer serves the operator commands' tests' repositories.
	gitServer *gittest.Server
)

const (
	testVersion = "v0.0.0-test"
	testCommit  = "0123456789abcdef0123456789abcdef01234567"
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "plumb-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	plumbBinary = filepath.Join(dir, "plumb")
	build := exec.Command("go", "build", "-o", plumbBinary,
		"-ldflags", fmt.Sprintf("-X main.version=%s -X main.commit=%s", testVersion, testCommit), ".")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building plumb: %v\n%s", err, out)
		os.Exit(1)
	}
	code := testenv.Run(m, testenv.Needs{Cluster: testenv.ModeAPI, CRDs: true, Git: true}, func(e *testenv.Env) { cluster, gitServer = e.Cluster, e.Git })
	os.RemoveAll(dir)
	os.Exit(code)
}

func TestVersionPrintsPlumbGoAndClientGoVersions(t *testing.T) {
	out, err := exec.Command(plumbBinary, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("plumb version: %v\n%s", err, out)
	}
	fields := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		key, value, _ := strings.Cut(line, ":")
		fields[key] = strings.TrimSpace(value)
	}
	want := map[string]string{
		"plumb":     testVersion,
		"commit":    testCommit,
		"go":        runtime.Version(),
		"client-go": moduleVersionFromGoMod(t, "k8s.io/client-go"),
	}
	for key, value := range want {
		if fields[key] != value {
			t.Errorf("plumb version: %s = %q, want %q (output:\n%s)", key, fields[key], value, out)
		}
	}
}

// moduleVersionFromGoMod reads a dependency's version with `go list`, an
// independent source of truth for what the binary should report.
func moduleVersionFromGoMod(t *testing.T, module string) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", module).Output()
	if err != nil {
		t.Fatalf("go list -m %s: %v", module, err)
	}
	return strings.TrimSpace(string(out))
}

func TestControllerServesHealthAndMetricsAndStopsOnSIGTERM(t *testing.T) {
	addrs := testenv.FreeAddrsForTest(t, 3)
	healthAddr, metricsAddr, pprofAddr := addrs[0], addrs[1], addrs[2]
	cmd := exec.Command(plumbBinary, "controller",
		"--kubeconfig", cluster.KubeconfigPath,
		"--health-addr", healthAddr, "--metrics-addr", metricsAddr, "--pprof-addr", pprofAddr,
		"--log-level", "debug", "--log-encoding", "json", "--git-cache-dir", t.TempDir())
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logLines := make(chan []string, 1)
	go func() {
		var lines []string
		scanner := bufio.NewScanner(stderr)
		for scanner.Scan() {
			lines = append(lines, scanner.Text())
		}
		logLines <- lines
	}()
	defer func() { _ = cmd.Process.Kill() }()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var readyBody string
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		status, body := get(ctx, "http://"+healthAddr+"/readyz")
		readyBody = body
		return status == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("/readyz never answered 200: %v (last body %q)", err, readyBody)
	}
	if status, body := get(ctx, "http://"+healthAddr+"/healthz"); status != http.StatusOK {
		t.Errorf("/healthz = %d %q, want 200", status, body)
	}
	var metricsBody string
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		status, body := get(ctx, "http://"+metricsAddr+"/metrics")
		metricsBody = body
		return status == http.StatusOK && strings.Contains(body, "go_goroutines"), nil
	})
	if err != nil {
		t.Errorf("/metrics never served go_goroutines: %v (last body %.300q)", err, metricsBody)
	}
	for _, series := range []string{"go_gc_heap_live_bytes", "process_resident_memory_bytes"} {
		if !strings.Contains(metricsBody, "\n"+series+" ") {
			t.Errorf("/metrics does not serve %s", series)
		}
	}
	if status, body := get(ctx, "http://"+pprofAddr+"/debug/pprof/"); status != http.StatusOK || !strings.Contains(body, "heap") {
		t.Errorf("--pprof-addr: /debug/pprof/ = %d %.200q, want 200 listing the heap profile", status, body)
	}
	if status, _ := get(ctx, "http://"+metricsAddr+"/debug/pprof/"); status == http.StatusOK {
		t.Error("the metrics address serves profiles")
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	lines := <-logLines
	if err := cmd.Wait(); err != nil {
		t.Errorf("controller exited with %v after SIGTERM, want status 0; logs:\n%s", err, strings.Join(lines, "\n"))
	}
	var messages []string
	for _, line := range lines {
		var entry struct {
			Level   string  `json:"level"`
			Msg     string  `json:"msg"`
			Version string  `json:"version"`
			QPS     float32 `json:"qps"`
			Limit   string  `json:"clientRateLimit"`
		}
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			t.Errorf("log line is not JSON: %q", line)
			continue
		}
		// The local kube-apiserver applies API Priority and Fairness, as
		// every API server since Kubernetes 1.20 does by default.
		if entry.Msg == "Connected to the API server" && (entry.Version == "" || entry.QPS >= 0 || !strings.Contains(entry.Limit, "Priority and Fairness")) {
			t.Errorf("log %q has no server version, or a client-side rate limit although the server applies API Priority and Fairness", line)
		}
		messages = append(messages, entry.Msg)
	}
	for _, want := range []string{"Connected to the API server", "Prepared the Read phase", "Started controller", "Stopped controller"} {
		if !slices.Contains(messages, want) {
			t.Errorf("logs %q lack %q", messages, want)
		}
	}
}

// emptyFile is an empty secret file for the flag tests.
var emptyFile = func() string {
	f, err := os.CreateTemp("", "empty-secret-")
	if err != nil {
		panic(err)
	}
	f.Close()
	return f.Name()
}()

// secretFile is a file holding secret, for a flag that reads one.
func secretFile(secret string) string {
	f, err := os.CreateTemp("", "plumb-secret-")
	if err != nil {
		panic(err)
	}
	defer f.Close()
	if _, err := f.WriteString(secret); err != nil {
		panic(err)
	}
	return f.Name()
}

func TestControllerRejectsBadFlagsBeforeStarting(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--log-encoding", "xml"}, `--log-encoding "xml": want json or console`},
		{[]string{"--log-level", "loud"}, `--log-level "loud": want debug, info, warn or error`},
		{[]string{"--health-addr", "8081"}, `--health-addr "8081": want host:port`},
		{[]string{"--kubeconfig", "/nonexistent/kubeconfig"}, "loading the kubeconfig"},
		{[]string{"--max-objects", "-1"}, "must not be negative"},
		{[]string{"--app-label-selector", "a in (b"}, `--app-label-selector "a in (b"`},
		{[]string{"--webhook-secret-file", "github=" + emptyFile}, "the github webhook secret in " + emptyFile + " is empty: refusing to serve github unverified"},
		{[]string{"--webhook-secret-file", "svn=/x"}, `unknown provider "svn"`},
		{[]string{"--webhook-secret-file", "dockerhub=" + secretFile("short")}, "the dockerhub webhook secret is its URL's last segment, the only proof of the sender: give at least 16 characters"},
		{[]string{"--webhook-secret-file", "quay=" + secretFile("a/long/secret/with/slashes")}, "use only letters, digits"},
		{[]string{"--kube-api-burst", "0"}, "--kube-api-burst 0: want at least 1"},
		{[]string{"--pprof-addr", ":6060"}, "only on a loopback address"},
		{[]string{"--pprof-addr", "0.0.0.0:6060"}, "only on a loopback address"},
		{[]string{"--watch-namespaces", "team-a,Team_B"}, `--watch-namespaces: "Team_B" is not a namespace name`},
		{[]string{"--watch-namespaces", "team-a,team-a"}, "--watch-namespaces: team-a is listed twice"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			args := append([]string{"controller", "--kubeconfig", cluster.KubeconfigPath, "--health-addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0"}, tt.args...)
			// A controller that takes the flags runs until killed: the deadline
			// turns that into a failure rather than a hang.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, plumbBinary, args...).CombinedOutput()
			if ctx.Err() != nil {
				t.Fatalf("plumb %v ran until killed, want it to refuse the flags", args)
			}
			if err == nil {
				t.Fatalf("plumb %v succeeded, want an error", args)
			}
			if !strings.Contains(string(out), tt.want) {
				t.Errorf("plumb %v printed %q, want it to contain %q", args, out, tt.want)
			}
		})
	}
}

func TestControllerFailsClearlyWhenTheAPIServerIsUnreachable(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	unreachable := "http://" + testenv.FreeAddrsForTest(t, 1)[0] // nothing listens there any more
	err := os.WriteFile(kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
users: [{name: u, user: {token: not-a-real-token}}]
current-context: c
`, unreachable)), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(plumbBinary, "controller", "--kubeconfig", kubeconfig).CombinedOutput()
	if err == nil {
		t.Fatal("controller started against an unreachable API server")
	}
	if want := "reaching the API server at " + unreachable; !strings.Contains(string(out), want) {
		t.Errorf("output %q does not contain %q", out, want)
	}
	if strings.Contains(string(out), "not-a-real-token") {
		t.Errorf("output leaks the kubeconfig's token: %q", out)
	}
}

func get(ctx context.Context, url string) (int, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
