package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
)

// GitHubSignature is the X-Hub-Signature-256 header GitHub sends with body
// for a webhook whose secret is secret.
func GitHubSignature(secret, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// NewGitHubPush is the request GitHub makes to deliver the push event body
// to target (a receiver's /hooks/github), signed with secret, as delivery
// delivery: what the demo, the benchmarks and the tests send plumb.
func NewGitHubPush(ctx context.Context, target string, secret, body []byte, delivery string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", "push")
	req.Header.Set("X-GitHub-Delivery", delivery)
	req.Header.Set("X-Hub-Signature-256", GitHubSignature(secret, body))
	return req, nil
}
