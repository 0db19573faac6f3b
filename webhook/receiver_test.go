package webhook

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

const secret = "webhook-secret"

// fixture reads a payload that go-playground/webhooks records from real
// providers (testdata in the module, not copied here).
func fixture(t testing.TB, name string) []byte {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/go-playground/webhooks/v6").Output()
	if err != nil {
		t.Fatalf("locating the webhooks module: %v", err)
	}
	data, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func hmacHex(body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return hex.EncodeToString(mac.Sum(nil))
}

// signed builds a provider's request for a payload, signed as the provider signs.
func signed(provider Provider, event string, body []byte) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/hooks/"+string(provider), bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	switch provider {
	case GitHub:
		r.Header.Set("X-GitHub-Event", event)
		r.Header.Set("X-Hub-Signature-256", "sha256="+hmacHex(body))
	case GitLab:
		r.Header.Set("X-Gitlab-Event", event)
		r.Header.Set("X-Gitlab-Token", secret)
	case Gitea:
		r.Header.Set("X-Gitea-Event", event)
		r.Header.Set("X-Gitea-Signature", hmacHex(body))
	case Gogs:
		r.Header.Set("X-Gogs-Event", event)
		r.Header.Set("X-Gogs-Signature", hmacHex(body))
	case BitbucketServer:
		r.Header.Set("X-Event-Key", event)
		r.Header.Set("X-Hub-Signature", "sha256="+hmacHex(body))
	}
	return r
}

// triggered records the Apps a receiver triggered.
type triggered struct {
	mu   sync.Mutex
	keys []types.NamespacedName
}

func (tr *triggered) add(k types.NamespacedName) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.keys = append(tr.keys, k)
}

func (tr *triggered) names() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var out []string
	for _, k := range tr.keys {
		out = append(out, k.Name)
	}
	return out
}

func newTestReceiver(t testing.TB, apps ...*plumbv1.App) (*Receiver, *triggered) {
	t.Helper()
	ix := NewIndex()
	for _, a := range apps {
		ix.Set(a)
	}
	tr := &triggered{}
	secrets := map[Provider]string{}
	for _, p := range Providers {
		secrets[p] = secret
	}
	rcv, err := NewReceiver(Options{Secrets: secrets, Index: ix, Trigger: tr.add})
	if err != nil {
		t.Fatal(err)
	}
	return rcv, tr
}

func TestSignedPushesOfEveryProviderTriggerTheirApps(t *testing.T) {
	rcv, tr := newTestReceiver(t,
		app("github", "git@github.com:binkkatal/sample_app.git", plumbv1.GitRef{Branch: "master"}, "", false),
		app("gitlab", "http://example.com/mike/diaspora", plumbv1.GitRef{Branch: "master"}, "", false),
		app("gitlab-tag", "ssh://git@example.com/jsmith/example", plumbv1.GitRef{SemVer: ">=1.0.0"}, "", false),
		app("gitea", "http://localhost:3000/example/example.git", plumbv1.GitRef{Branch: "master"}, "", false),
		app("gogs", "http://localhost:3000/unknwon/webhooks", plumbv1.GitRef{Branch: "develop"}, "", false),
		app("bitbucket", "https://server.bitbucket.local/scm/~gopher/webhook-test.git", plumbv1.GitRef{Branch: "feature/wip"}, "", false),
		app("bystander", "https://github.com/someone/else", plumbv1.GitRef{Branch: "master"}, "", false),
	)
	for _, tt := range []struct {
		provider Provider
		event    string
		fixture  string
		want     string
	}{
		{GitHub, "push", "github/push.json", "github"},
		{GitLab, "Push Hook", "gitlab/push-event.json", "gitlab"},
		{GitLab, "Tag Push Hook", "gitlab/tag-event.json", "gitlab-tag"},
		{Gitea, "push", "gitea/push-event.json", "gitea"},
		{Gogs, "push", "gogs/push-event.json", "gogs"},
		{BitbucketServer, "repo:refs_changed", "bitbucket-server/repo-refs-changed.json", "bitbucket"},
	} {
		t.Run(string(tt.provider)+" "+tt.event, func(t *testing.T) {
			before := len(tr.names())
			w := httptest.NewRecorder()
			rcv.Handler().ServeHTTP(w, signed(tt.provider, tt.event, fixture(t, tt.fixture)))
			if w.Code != http.StatusAccepted || !strings.Contains(w.Body.String(), "matched 1 apps") {
				t.Fatalf("answer %d %q", w.Code, w.Body.String())
			}
			if got := tr.names()[before:]; len(got) != 1 || got[0] != tt.want {
				t.Errorf("triggered %v, want [%s]", got, tt.want)
			}
		})
	}
}

func TestWhatGetsRefused(t *testing.T) {
	rcv, tr := newTestReceiver(t, app("github", "https://github.com/binkkatal/sample_app", plumbv1.GitRef{Branch: "master"}, "", false))
	push := fixture(t, "github/push.json")
	serve := func(r *http.Request) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		rcv.Handler().ServeHTTP(w, r)
		return w
	}
	t.Run("a bad signature is 401 without detail", func(t *testing.T) {
		r := signed(GitHub, "push", push)
		r.Header.Set("X-Hub-Signature-256", "sha256="+strings.Repeat("0", 64))
		if w := serve(r); w.Code != http.StatusUnauthorized || strings.TrimSpace(w.Body.String()) != "unauthorized" {
			t.Errorf("answer %d %q", w.Code, w.Body.String())
		}
	})
	t.Run("a missing signature is 401", func(t *testing.T) {
		r := signed(GitHub, "push", push)
		r.Header.Del("X-Hub-Signature-256")
		if w := serve(r); w.Code != http.StatusUnauthorized {
			t.Errorf("answer %d", w.Code)
		}
	})
	t.Run("a short signature is 401, not a crash", func(t *testing.T) {
		r := signed(BitbucketServer, "repo:refs_changed", fixture(t, "bitbucket-server/repo-refs-changed.json"))
		r.Header.Set("X-Hub-Signature", "abc")
		if w := serve(r); w.Code != http.StatusUnauthorized {
			t.Errorf("answer %d", w.Code)
		}
	})
	t.Run("a GitLab token that is wrong is 401", func(t *testing.T) {
		r := signed(GitLab, "Push Hook", fixture(t, "gitlab/push-event.json"))
		r.Header.Set("X-Gitlab-Token", "guess")
		if w := serve(r); w.Code != http.StatusUnauthorized {
			t.Errorf("answer %d", w.Code)
		}
	})
	t.Run("an 8 MiB body is 413 without being read", func(t *testing.T) {
		big := bytes.Repeat([]byte("x"), 8<<20)
		r := signed(GitHub, "push", big)
		if w := serve(r); w.Code != http.StatusRequestEntityTooLarge {
			t.Errorf("answer %d", w.Code)
		}
		r = signed(GitHub, "push", big)
		r.ContentLength = -1 // chunked: the cap stops the read
		if w := serve(r); w.Code != http.StatusRequestEntityTooLarge {
			t.Errorf("chunked: answer %d", w.Code)
		}
	})
	t.Run("a ping is 200", func(t *testing.T) {
		if w := serve(signed(GitHub, "ping", fixture(t, "github/ping.json"))); w.Code != http.StatusOK {
			t.Errorf("answer %d %q", w.Code, w.Body.String())
		}
	})
	t.Run("an unknown event is ignored", func(t *testing.T) {
		if w := serve(signed(GitHub, "issues", fixture(t, "github/issues.json"))); w.Code != http.StatusAccepted || !strings.Contains(w.Body.String(), "ignored") {
			t.Errorf("answer %d %q", w.Code, w.Body.String())
		}
	})
	t.Run("a malformed payload is 400", func(t *testing.T) {
		if w := serve(signed(GitHub, "push", []byte(`{"ref": [`))); w.Code != http.StatusBadRequest {
			t.Errorf("answer %d", w.Code)
		}
	})
	t.Run("GET is refused", func(t *testing.T) {
		if w := serve(httptest.NewRequest(http.MethodGet, "/hooks/github", nil)); w.Code != http.StatusMethodNotAllowed {
			t.Errorf("answer %d", w.Code)
		}
	})
	t.Run("a redelivery is recognised", func(t *testing.T) {
		before := len(tr.names())
		for range 2 {
			r := signed(GitHub, "push", push)
			r.Header.Set("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
			serve(r)
		}
		if got := len(tr.names()) - before; got != 1 {
			t.Errorf("a delivery and its redelivery triggered %d ticks, want 1", got)
		}
	})
	if got := tr.names(); len(got) != 1 {
		t.Errorf("refused requests triggered Apps: %v", got)
	}
}

func TestAProviderWithoutASecretIsRefusedAtStart(t *testing.T) {
	_, err := NewReceiver(Options{Secrets: map[Provider]string{GitHub: ""}, Index: NewIndex(), Trigger: func(types.NamespacedName) {}})
	if err == nil || !strings.Contains(err.Error(), "provider github has an empty secret") {
		t.Errorf("NewReceiver with an empty secret: %v", err)
	}
	if _, err := NewReceiver(Options{Index: NewIndex(), Trigger: func(types.NamespacedName) {}}); err == nil {
		t.Error("NewReceiver without providers succeeded")
	}
}

// FuzzHandler sends arbitrary headers and bodies: the handler must answer
// with one of its status codes and never panic or trigger without a valid
// signature.
func FuzzHandler(f *testing.F) {
	f.Add("github", "push", "sha256=00", []byte(`{"ref":"refs/heads/main"}`))
	f.Add("bitbucket-server", "repo:refs_changed", "abc", []byte(`{}`))
	f.Add("gitlab", "Push Hook", "", []byte(`{"object_kind":"push"`))
	f.Add("gitea", "push", "zz", []byte(nil))
	f.Add("harbor", "", secret, []byte(`{"type":"PUSH_ARTIFACT","event_data":{"resources":[{"tag":"1"}]}}`))
	f.Add("dockerhub/"+secret, "", "", []byte(`{"push_data":{"tag":"latest"},"repository":{"repo_name":"team/app"}}`))
	f.Add("quay/x", "", "", []byte(`{"docker_url":"quay.io/shop/api","updated_tags":["1"]}`))
	f.Add("github", "package", "sha256=00", []byte(`{"action":"published"}`))
	f.Fuzz(func(t *testing.T, provider, event, signature string, body []byte) {
		rcv, tr := newTestReceiver(t, app("any", "https://github.com/org/repo", plumbv1.GitRef{Branch: "main"}, "", false),
			ociApp("image", "oci://docker.io/team/app", plumbv1.OCIRef{SemVer: "*"}))
		segments := strings.Split(provider, "/")
		for i := range segments {
			segments[i] = url.PathEscape(segments[i])
		}
		r := httptest.NewRequest(http.MethodPost, "/hooks/"+strings.Join(segments, "/"), bytes.NewReader(body))
		for _, h := range []string{"X-GitHub-Event", "X-Gitlab-Event", "X-Gitea-Event", "X-Gogs-Event", "X-Event-Key"} {
			r.Header.Set(h, event)
		}
		for _, h := range []string{"X-Hub-Signature-256", "X-Hub-Signature", "X-Gitea-Signature", "X-Gogs-Signature", "X-Gitlab-Token", "Authorization"} {
			r.Header.Set(h, signature)
		}
		w := httptest.NewRecorder()
		rcv.Handler().ServeHTTP(w, r)
		switch w.Code {
		case http.StatusOK, http.StatusAccepted, http.StatusBadRequest, http.StatusUnauthorized, http.StatusNotFound,
			http.StatusRequestEntityTooLarge, http.StatusMethodNotAllowed,
			http.StatusMovedPermanently, http.StatusTemporaryRedirect, http.StatusPermanentRedirect: // the mux cleans odd paths
		default:
			t.Fatalf("unexpected status %d", w.Code)
		}
		// Docker Hub and Quay carry the secret in the URL instead.
		if len(tr.names()) > 0 && signature != secret && provider != "dockerhub/"+secret && provider != "quay/"+secret {
			t.Fatalf("an unsigned request triggered %v", tr.names())
		}
	})
}
