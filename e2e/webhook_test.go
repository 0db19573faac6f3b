package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/plumb-dev/plumb/webhook"
)

// recordedPayload reads a payload go-playground/webhooks recorded from a
// real provider, and rewrites the fields that name the repository and ref.
func recordedPayload(t *testing.T, name string, rewrite func(map[string]any)) []byte {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/go-playground/webhooks/v6").Output()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var payload map[string]any
	if err := json.Unmarshal(data, &payload); err != nil {
		t.Fatal(err)
	}
	rewrite(payload)
	body, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

func hmacSHA256(body []byte) string {
	return strings.TrimPrefix(webhook.GitHubSignature([]byte(webhookSecret), body), "sha256=")
}

// postHook sends a payload to the main controller's receiver.
func postHook(t *testing.T, provider string, headers map[string]string, body []byte) (int, string) {
	t.Helper()
	code, answer, err := sendHook(provider, headers, body)
	if err != nil {
		t.Fatalf("posting the %s webhook: %v", provider, err)
	}
	return code, answer
}

// sendHook is postHook for goroutines: it returns the error.
func sendHook(provider string, headers map[string]string, body []byte) (int, string, error) {
	return sendHookTo(controller.webhookAddr, provider, headers, body)
}

// githubPush is a signed GitHub push of main to the repository at url.
func githubPush(t *testing.T, url, delivery string) (map[string]string, []byte) {
	t.Helper()
	body := recordedPayload(t, "github/push.json", func(p map[string]any) {
		p["ref"] = "refs/heads/main"
		p["repository"].(map[string]any)["clone_url"] = url
	})
	return map[string]string{
		"X-GitHub-Event":      "push",
		"X-GitHub-Delivery":   delivery,
		"X-Hub-Signature-256": "sha256=" + hmacSHA256(body),
	}, body
}

// sendHookTo posts a payload to the receiver at addr.
func sendHookTo(addr, provider string, headers map[string]string, body []byte) (int, string, error) {
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/hooks/"+provider, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(answer), nil
}

func TestASignedPushConvergesLongBeforeTheTimer(t *testing.T) {
	setUp(t)
	for _, provider := range []string{"github", "gitlab", "gitea"} {
		t.Run(provider, func(t *testing.T) {
			ns := newNamespace(t)
			w, url, first := gitRepo(t, map[string]string{"deploy/config.yaml": configMapYAML("settings", "blue")})
			createApp(t, ns, "hooked", url, nil) // interval 10m
			readyAt(t, ns, "hooked", first)
			second := commit(t, w, map[string]string{"deploy/config.yaml": configMapYAML("settings", "pushed")})

			var body []byte
			headers := map[string]string{}
			switch provider {
			case "github":
				headers, body = githubPush(t, url, ns)
			case "gitlab":
				body = recordedPayload(t, "gitlab/push-event.json", func(p map[string]any) {
					p["ref"] = "refs/heads/main"
					p["project"].(map[string]any)["git_http_url"] = url
				})
				headers["X-Gitlab-Event"] = "Push Hook"
				headers["X-Gitlab-Token"] = webhookSecret
			case "gitea":
				body = recordedPayload(t, "gitea/push-event.json", func(p map[string]any) {
					p["ref"] = "refs/heads/main"
					p["repository"].(map[string]any)["clone_url"] = url
				})
				headers["X-Gitea-Event"] = "push"
				headers["X-Gitea-Signature"] = hmacSHA256(body)
			}
			start := time.Now()
			code, answer := postHook(t, provider, headers, body)
			if code != http.StatusAccepted || !strings.Contains(answer, "matched 1 apps") {
				t.Fatalf("%s webhook answered %d %q", provider, code, answer)
			}
			readyAt(t, ns, "hooked", second)
			t.Logf("%s push to applied: %s", provider, time.Since(start).Round(time.Millisecond))
			if cm, _ := getConfigMap(t, ns, "settings"); cm.Data["color"] != "pushed" {
				t.Errorf("color = %q after the push", cm.Data["color"])
			}
		})
	}
}

func TestAGitHubFormatPushFromAGiteaStyleSenderConverges(t *testing.T) {
	setUp(t)
	ns := newNamespace(t)
	w, url, first := gitRepo(t, map[string]string{"deploy/config.yaml": configMapYAML("settings", "blue")})
	createApp(t, ns, "compatible", url, nil) // interval 10m
	readyAt(t, ns, "compatible", first)
	second := commit(t, w, map[string]string{"deploy/config.yaml": configMapYAML("settings", "pushed")})
	// Gitea's GitHub-type hooks send times as RFC 3339 strings.
	body := recordedPayload(t, "github/push.json", func(p map[string]any) {
		p["ref"] = "refs/heads/main"
		repo := p["repository"].(map[string]any)
		repo["clone_url"] = url
		repo["created_at"], repo["pushed_at"] = "2026-11-30T12:00:00Z", "2026-11-30T12:00:00Z"
	})
	headers := map[string]string{"X-GitHub-Event": "push", "X-GitHub-Delivery": ns, "X-Hub-Signature-256": "sha256=" + hmacSHA256(body)}
	if code, answer := postHook(t, "github", headers, body); code != http.StatusAccepted || !strings.Contains(answer, "matched 1 apps") {
		t.Fatalf("answered %d %q", code, answer)
	}
	readyAt(t, ns, "compatible", second)
}

func TestAnUnsignedPushTriggersNothing(t *testing.T) {
	setUp(t)
	body := recordedPayload(t, "github/push.json", func(p map[string]any) {})
	code, answer := postHook(t, "github", map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + strings.Repeat("0", 64)}, body)
	if code != http.StatusUnauthorized || strings.TrimSpace(answer) != "unauthorized" {
		t.Errorf("a badly signed push got %d %q", code, answer)
	}
}

// TestAFloodOfPushesCollapsesIntoAFewTicks sends 1,000 signed pushes for one
// App at once: every one is answered, and the workqueue turns them into a
// handful of ticks.
func TestAFloodOfPushesCollapsesIntoAFewTicks(t *testing.T) {
	setUp(t)
	ns := newNamespace(t)
	w, url, first := gitRepo(t, map[string]string{"deploy/config.yaml": configMapYAML("settings", "blue")})
	createApp(t, ns, "flooded", url, nil)
	readyAt(t, ns, "flooded", first)
	second := commit(t, w, map[string]string{"deploy/config.yaml": configMapYAML("settings", "flood")})
	body := recordedPayload(t, "github/push.json", func(p map[string]any) {
		p["ref"] = "refs/heads/main"
		p["repository"].(map[string]any)["clone_url"] = url
	})
	headers := map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + hmacSHA256(body)}
	ticksBefore := strings.Count(controller.tail(1_000_000), `Ticked	{"app": "`+ns+`/flooded"`)

	const pushes, senders = 1000, 20
	codes := make(chan int, pushes)
	start := time.Now()
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i := s; i < pushes; i += senders {
				code, _, _ := sendHook("github", headers, body) // an error counts as not answered
				codes <- code
			}
		})
	}
	wg.Wait()
	close(codes)
	sent := time.Since(start)
	accepted := 0
	for code := range codes {
		if code == http.StatusAccepted {
			accepted++
		}
	}
	if accepted != pushes {
		t.Errorf("%d of %d pushes answered 202", accepted, pushes)
	}
	readyAt(t, ns, "flooded", second)
	ticks := strings.Count(controller.tail(1_000_000), `Ticked	{"app": "`+ns+`/flooded"`) - ticksBefore
	t.Logf("%d pushes answered in %s; %d ticks", pushes, sent.Round(time.Millisecond), ticks)
	// While a tick runs, further pushes leave one tick pending: the count
	// depends on how the burst overlaps ticks, never on the number of pushes.
	if ticks < 1 || ticks > 10 {
		t.Errorf("%d pushes made %d ticks, want between 1 and a handful (10)", pushes, ticks)
	}
}
