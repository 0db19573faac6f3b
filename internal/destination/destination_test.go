package destination

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/plumb-dev/plumb/internal/egress"
)

// kubeconfig is a self-contained kubeconfig for server with token, and
// extra appended to its user (indented as the user's fields).
func kubeconfig(server, token, extra string) []byte {
	return fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: b
  cluster:
    server: %s
    insecure-skip-tls-verify: true
users:
- name: plumb
  user:
    token: %s
%s
contexts:
- name: b
  context: {cluster: b, user: plumb}
current-context: b
`, server, token, extra)
}

func TestParseMakesTheConfigOfTheCurrentContext(t *testing.T) {
	cfg, server, err := Parse(kubeconfig("https://b.example:6443", "s3cret", ""), ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://b.example:6443" || cfg.BearerToken != "s3cret" || server != "https://b.example:6443" {
		t.Errorf("config host %q, token set %v, server %q", cfg.Host, cfg.BearerToken != "", server)
	}
}

// What would read the controller's disk or run a command on it is refused
// (plugins unless allowed), and no error quotes the kubeconfig's token.
func TestParseRefusesFilesAndPluginsAndQuotesNoSecret(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		want       string
		allowed    bool // with AllowPlugins
	}{
		{"not YAML", "s3cret: [unclosed", "not a kubeconfig", false},
		{"empty", " ", "empty", false},
		{"a token file", string(kubeconfig("https://b:6443", "s3cret", "    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token")), "tokenFile", false},
		{"a client key file", string(kubeconfig("https://b:6443", "s3cret", "    client-key: /etc/plumb/key.pem")), "client-key", false},
		{"a CA file", strings.Replace(string(kubeconfig("https://b:6443", "s3cret", "")), "insecure-skip-tls-verify: true", "certificate-authority: /etc/ssl/ca.pem", 1), "certificate-authority", false},
		{"an exec plugin", string(kubeconfig("https://b:6443", "s3cret", "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/sh\n      args: [-c, id]\n      interactiveMode: Never")), "--allow-kubeconfig-plugins", true},
		{"an auth-provider", string(kubeconfig("https://b:6443", "s3cret", "    auth-provider:\n      name: oidc\n      config: {client-id: x}")), "--allow-kubeconfig-plugins", true},
		{"no current context", strings.Replace(string(kubeconfig("https://b:6443", "s3cret", "")), "current-context: b", "current-context: c", 1), "not among its contexts", false},
		{"a server that is no URL", string(kubeconfig("b:6443", "s3cret", "")), "https://", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Parse([]byte(tc.data), ParseOptions{})
			if !errors.Is(err, ErrInvalidKubeConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse: %v, want ErrInvalidKubeConfig naming %q", err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), "s3cret") {
				t.Errorf("the error quotes the token: %v", err)
			}
			_, _, err = Parse([]byte(tc.data), ParseOptions{AllowPlugins: true})
			if tc.allowed && err != nil {
				t.Errorf("with plugins allowed: %v", err)
			}
		})
	}
}

// built counts what a Manager builds and stops.
type built struct {
	conn    *Connection
	stopped bool
	left    []types.NamespacedName
}

func newManager(t *testing.T, max int) (*Manager[*built], *[]*built) {
	t.Helper()
	var all []*built
	m := New(Options[*built]{Max: max,
		Build: func(conn *Connection) (*built, error) { b := &built{conn: conn}; all = append(all, b); return b, nil },
		Leave: func(app types.NamespacedName, b *built) { b.left = append(b.left, app) },
		Stop:  func(b *built) { b.stopped = true },
	})
	return m, &all
}

// Apps of one namespace that name one Secret share its connection; a
// changed Secret (a rotated token) makes a new one, and the old stops once
// no App uses it; the same content in another namespace's Secret is a
// connection of its own; the last App's leaving stops it.
func TestConnectionsAreSharedPerSecretAndContentAndStoppedWhenUnused(t *testing.T) {
	m, all := newManager(t, 0)
	a1, a2 := types.NamespacedName{Namespace: "team", Name: "one"}, types.NamespacedName{Namespace: "team", Name: "two"}
	other := types.NamespacedName{Namespace: "other", Name: "one"}
	first := kubeconfig("https://b:6443", "first", "")
	v1, conn, err := m.For(a1, "cluster-b", first)
	if err != nil {
		t.Fatal(err)
	}
	if conn.Name != "cluster-b" || conn.Namespace != "team" || conn.Server != "https://b:6443" {
		t.Errorf("connection %+v", conn)
	}
	if v2, _, _ := m.For(a2, "cluster-b", first); v2 != v1 || len(*all) != 1 {
		t.Fatalf("the second App of the namespace got a connection of its own (%d built)", len(*all))
	}
	if v3, _, _ := m.For(other, "cluster-b", first); v3 == v1 {
		t.Fatal("another namespace's Secret with the same content shares the connection")
	}
	rotated := kubeconfig("https://b:6443", "second", "")
	v4, _, err := m.For(a1, "cluster-b", rotated)
	if err != nil || v4 == v1 {
		t.Fatalf("a rotated Secret kept the old connection: %v", err)
	}
	if v1.stopped {
		t.Fatal("the old connection stopped while App two still uses it")
	}
	if len(v1.left) != 1 || v1.left[0] != a1 {
		t.Errorf("Apps that left the old connection: %v, want [team/one]", v1.left)
	}
	if _, _, err := m.For(a2, "cluster-b", rotated); err != nil {
		t.Fatal(err)
	}
	if !v1.stopped || m.Len() != 2 {
		t.Errorf("after both Apps moved to the rotated Secret: old stopped %v, %d open, want stopped and 2 open", v1.stopped, m.Len())
	}
	m.Release(a1)
	m.Release(a2)
	if !v4.stopped {
		t.Error("the connection no App uses was not stopped")
	}
}

// Beyond MaxPerNamespace destinations of one namespace a new one of it is
// refused, naming the flag, while another namespace still gets one.
func TestOneNamespaceCannotTakeEveryDestination(t *testing.T) {
	m := New(Options[*built]{Max: 10, MaxPerNamespace: 2,
		Build: func(conn *Connection) (*built, error) { return &built{conn: conn}, nil },
		Leave: func(types.NamespacedName, *built) {},
		Stop:  func(*built) {},
	})
	for i := range 2 {
		if _, _, err := m.For(types.NamespacedName{Namespace: "greedy", Name: fmt.Sprint(i)}, fmt.Sprint("cluster-", i), kubeconfig("https://b:6443", "t", "")); err != nil {
			t.Fatal(err)
		}
	}
	_, _, err := m.For(types.NamespacedName{Namespace: "greedy", Name: "third"}, "cluster-3", kubeconfig("https://b:6443", "t", ""))
	if !errors.Is(err, ErrTooManyDestinations) || !strings.Contains(err.Error(), "--max-destinations-per-namespace") {
		t.Fatalf("a third destination of one namespace: %v, want ErrTooManyDestinations naming the flag", err)
	}
	// A second App of the namespace on a Secret that has a connection is
	// no new destination.
	if _, _, err := m.For(types.NamespacedName{Namespace: "greedy", Name: "fourth"}, "cluster-0", kubeconfig("https://b:6443", "t", "")); err != nil {
		t.Errorf("a second App on an open destination: %v", err)
	}
	if _, _, err := m.For(types.NamespacedName{Namespace: "modest", Name: "one"}, "cluster-0", kubeconfig("https://b:6443", "t", "")); err != nil {
		t.Errorf("another namespace's first destination: %v", err)
	}
}

// Beyond Max connections a new one is refused, not made by dropping
// another App's; an App that moves off its own connection frees its place.
func TestMoreDestinationsThanTheLimitAreRefused(t *testing.T) {
	m, _ := newManager(t, 2)
	for i := range 2 {
		app := types.NamespacedName{Namespace: "team", Name: fmt.Sprint(i)}
		if _, _, err := m.For(app, fmt.Sprint("cluster-", i), kubeconfig("https://b:6443", "t", "")); err != nil {
			t.Fatal(err)
		}
	}
	third := types.NamespacedName{Namespace: "team", Name: "third"}
	if _, _, err := m.For(third, "cluster-3", kubeconfig("https://b:6443", "t", "")); !errors.Is(err, ErrTooManyDestinations) {
		t.Fatalf("a third destination: %v, want ErrTooManyDestinations", err)
	}
	// App 0 alone uses cluster-0: its rotated Secret replaces it.
	if _, _, err := m.For(types.NamespacedName{Namespace: "team", Name: "0"}, "cluster-0", kubeconfig("https://b:6443", "rotated", "")); err != nil {
		t.Errorf("rotating the Secret of an App's own connection at the limit: %v", err)
	}
	// cluster-1, shared by two Apps, rotated: the first App to tick moves
	// to the new content while the other still uses the old; no new
	// destination.
	shared := types.NamespacedName{Namespace: "team", Name: "shared"}
	if _, _, err := m.For(shared, "cluster-1", kubeconfig("https://b:6443", "t", "")); err != nil {
		t.Fatal(err)
	}
	_, conn, err := m.For(types.NamespacedName{Namespace: "team", Name: "1"}, "cluster-1", kubeconfig("https://b:6443", "rotated", ""))
	if err != nil {
		t.Errorf("rotating a Secret two Apps use, at the limit: %v", err)
	}
	if m.Uses(shared, conn) || !m.Uses(types.NamespacedName{Namespace: "team", Name: "1"}, conn) {
		t.Error("Uses does not tell which App uses the rotated connection")
	}
}

// versionServer is an API server that answers its version, and counts the
// requests it gets.
func versionServer(t *testing.T) (*httptest.Server, *atomic.Int32) {
	var asked atomic.Int32
	server := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"major":"1","minor":"37","gitVersion":"v1.37.2"}`))
	}))
	t.Cleanup(server.Close)
	return server, &asked
}

// Reachable asks the API server for its version, and not again while a
// success is fresh; Forget makes it ask again; a server that is gone is
// unreachable, named by its URL.
func TestReachableAsksOnceWhileFresh(t *testing.T) {
	server, asked := versionServer(t)
	m, _ := newManager(t, 0)
	_, conn, err := m.For(types.NamespacedName{Namespace: "team", Name: "one"}, "cluster-b", kubeconfig(server.URL, "t", ""))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := conn.Reachable(); err != nil {
			t.Fatal(err)
		}
	}
	if n := asked.Load(); n != 1 {
		t.Errorf("three probes within the validity asked %d times, want 1", n)
	}
	conn.Forget()
	if err := conn.Reachable(); err != nil || asked.Load() != 2 {
		t.Errorf("after Forget: %v, asked %d times, want 2", err, asked.Load())
	}
	server.Close()
	conn.Forget()
	if err := conn.Reachable(); err == nil || !strings.Contains(err.Error(), server.URL) {
		t.Errorf("a server that is gone: %v, want an error naming %s", err, server.URL)
	}
}

// A destination's API server at a blocked address is never dialled:
// Reachable says its address is blocked, names the flag, and the server
// gets no request; the same server in no blocked range answers. A host
// name that resolves to the range is blocked too.
func TestBlockedAddressesAreNeverDialled(t *testing.T) {
	server, asked := versionServer(t)
	byName := strings.Replace(server.URL, "127.0.0.1", "localhost", 1)
	app := types.NamespacedName{Namespace: "team", Name: "one"}
	for _, url := range []string{server.URL, byName} {
		m := New(Options[*built]{
			Parse: ParseOptions{Blocked: egress.DefaultBlockedPrefixes()},
			Build: func(conn *Connection) (*built, error) { return &built{conn: conn}, nil },
			Leave: func(types.NamespacedName, *built) {},
			Stop:  func(*built) {},
		})
		_, conn, err := m.For(app, "cluster-b", kubeconfig(url, "t", ""))
		if err != nil {
			t.Fatal(err)
		}
		err = conn.Reachable()
		if err == nil || !strings.Contains(err.Error(), "--destination-blocked-cidrs") {
			t.Errorf("%s with loopback blocked: %v, want the blocked-range error", url, err)
		}
	}
	if n := asked.Load(); n != 0 {
		t.Fatalf("the blocked server got %d requests", n)
	}
	m, _ := newManager(t, 0) // nothing blocked
	_, conn, err := m.For(app, "cluster-b", kubeconfig(server.URL, "t", ""))
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Reachable(); err != nil || asked.Load() != 1 {
		t.Errorf("with nothing blocked: %v, asked %d times, want 1", err, asked.Load())
	}
}

// A failed probe is the answer for as long as a probe may take (longer
// than the 2 s floor here): Apps that tick into a cluster that does not
// answer wait for no probe of their own meanwhile; once it has passed, the
// next tick asks again. The failure names the server's HTTP status, never
// its body.
func TestAFailedProbeIsRememberedForTheProbesTimeout(t *testing.T) {
	var asked atomic.Int32
	server := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		http.Error(w, "SERVER-BODY-SECRET", http.StatusServiceUnavailable)
	}))
	t.Cleanup(server.Close)
	clock := clocktesting.NewFakePassiveClock(time.Now())
	m := New(Options[*built]{ProbeTimeout: 5 * time.Second, Clock: clock,
		Build: func(conn *Connection) (*built, error) { return &built{conn: conn}, nil },
		Leave: func(types.NamespacedName, *built) {},
		Stop:  func(*built) {},
	})
	_, conn, err := m.For(types.NamespacedName{Namespace: "team", Name: "one"}, "cluster-b", kubeconfig(server.URL, "t", ""))
	if err != nil {
		t.Fatal(err)
	}
	probe := func() {
		t.Helper()
		err := conn.Reachable()
		if err == nil || !strings.Contains(err.Error(), "HTTP 503") || strings.Contains(err.Error(), "SERVER-BODY-SECRET") {
			t.Fatalf("a server answering 503: %v, want its status alone", err)
		}
	}
	probe()
	start := clock.Now()
	for _, at := range []time.Duration{time.Second, 3 * time.Second, 4900 * time.Millisecond} {
		clock.SetTime(start.Add(at))
		probe()
		if n := asked.Load(); n != 1 {
			t.Fatalf("%s after a failed probe (the probe's timeout 5s): asked %d times, want 1", at, n)
		}
	}
	clock.SetTime(start.Add(5 * time.Second))
	probe()
	if n := asked.Load(); n != 2 {
		t.Errorf("once the probe's timeout passed: asked %d times, want 2", n)
	}
}
