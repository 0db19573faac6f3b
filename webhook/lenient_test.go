package webhook

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

// rewritten is a recorded payload with some fields replaced.
func rewritten(t *testing.T, name string, rewrite func(map[string]any)) []byte {
	t.Helper()
	var payload map[string]any
	if err := json.Unmarshal(fixture(t, name), &payload); err != nil {
		t.Fatal(err)
	}
	rewrite(payload)
	body, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

func TestAGitHubCompatibleSenderWithOtherFieldTypesStillTriggers(t *testing.T) {
	rcv, tr := newTestReceiver(t, app("github", "git@github.com:binkkatal/sample_app.git", plumbv1.GitRef{Branch: "master"}, "", false))
	// Gitea's GitHub-type hooks (and GitHub Enterprise versions) send times
	// as RFC 3339 strings where github.com sends numbers.
	body := rewritten(t, "github/push.json", func(p map[string]any) {
		repo := p["repository"].(map[string]any)
		repo["created_at"] = "2026-11-30T12:00:00Z"
		repo["pushed_at"] = "2026-11-30T12:00:00Z"
	})
	w := httptest.NewRecorder()
	rcv.Handler().ServeHTTP(w, signed(GitHub, "push", body))
	if w.Code != http.StatusAccepted || !strings.Contains(w.Body.String(), "matched 1 apps") {
		t.Fatalf("answer %d %q", w.Code, w.Body.String())
	}
	if got := tr.names(); len(got) != 1 || got[0] != "github" {
		t.Errorf("triggered %v", got)
	}
}

func TestEveryEventIsVerifiedBeforeAnythingElse(t *testing.T) {
	rcv, _ := newTestReceiver(t)
	for _, tt := range []struct {
		provider       Provider
		event, fixture string
	}{
		{GitHub, "issues", "github/issues.json"},
		{GitHub, "made-up-event", "github/issues.json"},
		{Gitea, "issues", "gitea/issues-event.json"},
		{GitLab, "Issue Hook", "gitlab/issue-event.json"},
	} {
		t.Run(string(tt.provider)+" "+tt.event, func(t *testing.T) {
			r := signed(tt.provider, tt.event, fixture(t, tt.fixture))
			for _, h := range []string{"X-Hub-Signature-256", "X-Gitea-Signature", "X-Gitlab-Token"} {
				r.Header.Del(h)
			}
			w := httptest.NewRecorder()
			rcv.Handler().ServeHTTP(w, r)
			if w.Code != http.StatusUnauthorized {
				t.Errorf("an unsigned %s event got %d %q, want 401", tt.event, w.Code, w.Body.String())
			}
		})
	}
}

func TestASignedRequestThatIsRefusedIsLogged(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	rcv, _ := newTestReceiver(t)
	rcv.opts.Log = zap.New(core)
	r := signed(GitHub, "push", []byte(`{"ref": [`))
	r.Header.Set("X-GitHub-Delivery", "d-1")
	w := httptest.NewRecorder()
	rcv.Handler().ServeHTTP(w, r)
	if w.Code != http.StatusBadRequest {
		t.Fatalf("answer %d", w.Code)
	}
	entries := logs.All()
	if len(entries) != 1 || entries[0].ContextMap()["provider"] != "github" || entries[0].ContextMap()["delivery"] != "d-1" ||
		entries[0].ContextMap()["reason"] == "" {
		t.Errorf("logged %+v, want one warning naming provider, delivery and reason", entries)
	}
}

func TestOnlyAPushEventIsReadLeniently(t *testing.T) {
	rcv, tr := newTestReceiver(t, app("github", "git@github.com:binkkatal/sample_app.git", plumbv1.GitRef{Branch: "master"}, "", false))
	body := rewritten(t, "github/push.json", func(p map[string]any) {
		p["repository"].(map[string]any)["created_at"] = "2026-11-30T12:00:00Z"
	})
	for _, event := range []string{"made-up-event", "issues", ""} {
		r := signed(GitHub, event, body)
		if event == "" {
			r.Header.Del("X-GitHub-Event")
		}
		w := httptest.NewRecorder()
		rcv.Handler().ServeHTTP(w, r)
		if strings.Contains(w.Body.String(), "matched") {
			t.Errorf("event %q with a push's payload was taken for a push: %d %q", event, w.Code, w.Body.String())
		}
	}
	if got := tr.names(); len(got) != 0 {
		t.Errorf("triggered %v", got)
	}
}

func TestAWrongSignatureGets401WhateverTheEvent(t *testing.T) {
	rcv, _ := newTestReceiver(t)
	for _, event := range []string{"push", "issues", "ping", "made-up-event"} {
		r := signed(GitHub, event, fixture(t, "github/issues.json"))
		r.Header.Set("X-Hub-Signature-256", "sha256="+strings.Repeat("0", 64))
		w := httptest.NewRecorder()
		rcv.Handler().ServeHTTP(w, r)
		if w.Code != http.StatusUnauthorized {
			t.Errorf("a %s event with a wrong signature got %d %q, want 401", event, w.Code, w.Body.String())
		}
	}
}
