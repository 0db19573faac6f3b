package main

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/plumb-dev/plumb/internal/notify"
	"github.com/plumb-dev/plumb/webhook"
)

// randomSecret is a fresh 32-byte secret, hex-encoded.
func randomSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// sendPush delivers a GitHub push of main at hash, signed with secret, to
// the controller's webhook receiver at addr, as GitHub would.
func sendPush(ctx context.Context, addr, secret, repoURL, hash string) error {
	body, err := json.Marshal(map[string]any{
		"ref": "refs/heads/main", "after": hash,
		"repository": map[string]any{"clone_url": repoURL, "html_url": strings.TrimSuffix(repoURL, ".git")},
	})
	if err != nil {
		return err
	}
	req, err := webhook.NewGitHubPush(ctx, "http://"+addr+"/hooks/github", []byte(secret), body, hash)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("delivering the push webhook: %w", err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("the webhook receiver answered %d %s", resp.StatusCode, answer)
	}
	return nil
}

// receivedEvent is a notification as the demo's receiver reads it.
type receivedEvent struct {
	Kind    string                 `json:"kind"`
	Healed  bool                   `json:"healed"`
	Objects []notify.DriftedObject `json:"objects"`
}

// receiver is the demo's notification sink: an HTTP server on loopback that
// checks each request's signature and hands the events over.
type receiver struct {
	URL    string
	events chan receivedEvent
	server *http.Server
}

func startReceiver(key string) (*receiver, error) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &receiver{URL: "http://" + listener.Addr().String() + "/plumb", events: make(chan receivedEvent, 16)}
	r.server = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
		want := "sha256=" + notify.Sign([]byte(key), body)
		if err != nil || !hmac.Equal([]byte(req.Header.Get(notify.SignatureHeader)), []byte(want)) {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		var e receivedEvent
		if err := json.Unmarshal(body, &e); err != nil {
			http.Error(w, "bad payload", http.StatusBadRequest)
			return
		}
		select {
		case r.events <- e:
		default:
		}
	})}
	go func() { _ = r.server.Serve(listener) }()
	return r, nil
}

// next waits for the next event of kind.
func (r *receiver) next(ctx context.Context, kind string) (receivedEvent, error) {
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	for {
		select {
		case e := <-r.events:
			if e.Kind == kind {
				return e, nil
			}
		case <-ctx.Done():
			return receivedEvent{}, errors.New("timed out waiting for a " + kind + " notification")
		}
	}
}

func (r *receiver) stop() { _ = r.server.Close() }
