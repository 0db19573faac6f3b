package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

// Headers of the generic webhook sink.
const (
	// SignatureHeader carries "sha256=" and the hex HMAC-SHA256 of the body
	// under the Secret's hmacKey (as GitHub signs its webhooks).
	SignatureHeader = "X-Plumb-Signature-256"
	// EventHeader names the event kind.
	EventHeader = "X-Plumb-Event"
)

// The Secret keys a Notification reads.
const (
	secretToken   = "token"
	secretHMACKey = "hmacKey"
	secretAddress = "address"
)

var (
	driftKinds    = []plumbv1.NotificationEvent{plumbv1.EventDriftDetected, plumbv1.EventDriftResolved}
	revisionKinds = []plumbv1.NotificationEvent{plumbv1.EventRevisionPending, plumbv1.EventRevisionSucceeded, plumbv1.EventRevisionFailed}
)

// isCommitStatus reports whether a sink type posts commit statuses.
func isCommitStatus(t plumbv1.SinkType) bool {
	return t == plumbv1.SinkGitHub || t == plumbv1.SinkGitLab || t == plumbv1.SinkGitea
}

// acceptsKind reports whether a sink of type t, asked for events (empty:
// its defaults), sends an event of this kind. Commit statuses only take
// revision events; Alertmanager only drift events.
func acceptsKind(t plumbv1.SinkType, events []plumbv1.NotificationEvent, kind plumbv1.NotificationEvent) bool {
	possible := append(append([]plumbv1.NotificationEvent{}, driftKinds...), revisionKinds...)
	defaults := driftKinds
	switch {
	case isCommitStatus(t):
		possible, defaults = revisionKinds, revisionKinds
	case t == plumbv1.SinkAlertmanager:
		possible = driftKinds
	}
	if !slices.Contains(possible, kind) {
		return false
	}
	if len(events) == 0 {
		return slices.Contains(defaults, kind)
	}
	return slices.Contains(events, kind)
}

// request builds the HTTP request that delivers dl to n; nil when there is
// nothing to send.
func (d *Dispatcher) request(ctx context.Context, n *plumbv1.Notification, secret map[string][]byte, dl *delivery) (*http.Request, error) {
	address := n.Spec.Address
	if a, ok := secret[secretAddress]; ok {
		address = strings.TrimSpace(string(a))
	}
	if address == "" {
		switch n.Spec.Type {
		case plumbv1.SinkGitHub:
			address = "https://api.github.com"
		case plumbv1.SinkGitLab:
			address = "https://gitlab.com"
		default:
			return nil, errors.New("no address: set spec.address or the Secret's address key")
		}
	}
	base, err := url.Parse(address)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, errors.New("the address is not an http(s) URL") // the address may be secret: not shown
	}
	token := strings.TrimSpace(string(secret[secretToken]))
	e := &dl.event
	if dl.refresh && n.Spec.Type != plumbv1.SinkAlertmanager {
		d.untrack(types.NamespacedName{Namespace: n.Namespace, Name: n.Name}, e.App)
		return nil, nil // the Notification is no longer an Alertmanager one
	}
	switch n.Spec.Type {
	case plumbv1.SinkWebhook:
		return webhookRequest(ctx, base, secret[secretHMACKey], e)
	case plumbv1.SinkSlack:
		return jsonRequest(ctx, base.String(), map[string]string{"text": slackText(e)})
	case plumbv1.SinkAlertmanager:
		return d.alertRequest(ctx, n, base, token, dl)
	default:
		return commitStatusRequest(ctx, n.Spec.Type, base, token, e)
	}
}

// jsonRequest is a POST of body as JSON to target.
func jsonRequest(ctx context.Context, target string, body any) (*http.Request, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	return postJSON(ctx, target, data)
}

// postJSON is a POST of JSON data to target.
func postJSON(ctx context.Context, target string, data []byte) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(data))
	if err != nil {
		return nil, errors.New("building the request failed")
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "plumb")
	return req, nil
}

// webhookPayload is what the generic webhook sink posts.
type webhookPayload struct {
	App struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"app"`
	*Event
}

// webhookRequest posts the event as JSON, signed when there is a key.
func webhookRequest(ctx context.Context, target *url.URL, key []byte, e *Event) (*http.Request, error) {
	payload := webhookPayload{Event: e}
	payload.App.Namespace, payload.App.Name = e.App.Namespace, e.App.Name
	data, err := json.Marshal(payload)
	if err != nil {
		return nil, err
	}
	req, err := postJSON(ctx, target.String(), data)
	if err != nil {
		return nil, err
	}
	req.Header.Set(EventHeader, string(e.Kind))
	if len(key) > 0 {
		req.Header.Set(SignatureHeader, "sha256="+Sign(key, data))
	}
	return req, nil
}

// Sign is the hex HMAC-SHA256 of body under key, as SignatureHeader
// carries it after "sha256=".
func Sign(key, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write(body)
	return hex.EncodeToString(mac.Sum(nil))
}

// Summary is the event in one line of plain text.
func Summary(e *Event) string {
	switch e.Kind {
	case plumbv1.EventDriftDetected:
		what := "left in place (driftPolicy alert)"
		if e.Healed {
			what = "put back by plumb"
		}
		objects := "objects"
		if e.Count == 1 {
			objects = "object"
		}
		return fmt.Sprintf("Drift in App %s at %s: %d %s changed outside Git, %s", e.appWhere(), e.Revision, e.Count, objects, what)
	case plumbv1.EventDriftResolved:
		return fmt.Sprintf("Drift in App %s resolved: its objects match Git at %s", e.appWhere(), e.Revision)
	default:
		return e.Message
	}
}

// slackEscape escapes text for Slack's mrkdwn: &, < and > (so that a value
// someone wrote into a live object cannot ping a channel or forge a link),
// and backticks, which would end a code span.
var slackEscape = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", "`", "'")

// slackText is the event as a Slack message (mrkdwn).
func slackText(e *Event) string {
	var b strings.Builder
	b.WriteString("*" + slackEscape.Replace(Summary(e)) + "*")
	for _, o := range e.Objects {
		ref := o.Kind + " " + o.Name
		if o.Namespace != "" {
			ref = o.Kind + " " + o.Namespace + "/" + o.Name
		}
		ref = slackEscape.Replace(ref)
		if o.Deleted {
			fmt.Fprintf(&b, "\n• %s was deleted", ref)
		}
		for _, f := range o.Fields {
			fmt.Fprintf(&b, "\n• %s `%s`", ref, slackEscape.Replace(f.Path))
			if f.Before != "" || f.After != "" {
				fmt.Fprintf(&b, ": `%s` → `%s`", slackEscape.Replace(f.Before), slackEscape.Replace(f.After))
			}
			if f.Manager != "" {
				fmt.Fprintf(&b, " by %s", slackEscape.Replace(f.Manager))
				if f.Operation != "" {
					fmt.Fprintf(&b, " (%s", f.Operation)
					if f.Time != nil {
						fmt.Fprintf(&b, " at %s", f.Time.UTC().Format(time.RFC3339))
					}
					b.WriteString(")")
				}
			}
		}
	}
	if e.Count > len(e.Objects) {
		fmt.Fprintf(&b, "\n• and %d more objects", e.Count-len(e.Objects))
	}
	return b.String()
}
