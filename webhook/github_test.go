package webhook

import (
	"context"
	"io"
	"testing"
)

// A push made by NewGitHubPush passes the receiver's verification with its
// secret, and only with it.
func TestNewGitHubPushIsSignedAsGitHubSignsIt(t *testing.T) {
	body := []byte(`{"ref":"refs/heads/main"}`)
	req, err := NewGitHubPush(context.Background(), "http://127.0.0.1:1/hooks/github", []byte("s3cret"), body, "d-1")
	if err != nil {
		t.Fatal(err)
	}
	sent, _ := io.ReadAll(req.Body)
	if string(sent) != string(body) || req.Header.Get("X-GitHub-Event") != "push" || req.Header.Get("X-GitHub-Delivery") != "d-1" {
		t.Fatalf("request %v with body %q", req.Header, sent)
	}
	if !verified(GitHub, "s3cret", req, body) {
		t.Error("the receiver refuses the push with its own secret")
	}
	if verified(GitHub, "other", req, body) {
		t.Error("the receiver takes the push with another secret")
	}
}
