package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
)

// verified checks a request's signature (or token) as its provider signs
// it, before anything else looks at the request: every event, known or not,
// must be signed. Bitbucket Server's "Test connection" ping is unsigned;
// Docker Hub and Quay sign nothing, and prove the secret by the URL.
func verified(provider Provider, secret string, r *http.Request, body []byte) bool {
	h := r.Header
	switch provider {
	case GitHub:
		return hmacMatches(secret, body, strings.TrimPrefix(h.Get("X-Hub-Signature-256"), "sha256="), h.Get("X-Hub-Signature-256") != "")
	case GitLab:
		token := h.Get("X-Gitlab-Token")
		return token != "" && secretEqual(token, secret)
	case Gitea:
		return hmacMatches(secret, body, h.Get("X-Gitea-Signature"), true)
	case Gogs:
		return hmacMatches(secret, body, h.Get("X-Gogs-Signature"), true)
	case BitbucketServer:
		if h.Get("X-Event-Key") == "diagnostics:ping" && h.Get("X-Hub-Signature") == "" {
			return true
		}
		sig, ok := strings.CutPrefix(h.Get("X-Hub-Signature"), "sha256=")
		return ok && hmacMatches(secret, body, sig, true)
	case Harbor:
		auth := h.Get("Authorization")
		return auth != "" && secretEqual(auth, secret)
	case DockerHub, Quay:
		return secretInPath(provider, secret, r)
	}
	return false
}

// secretEqual compares a secret as sent with the configured one in time
// that tells nothing of either, its length included: it compares their
// SHA-256 digests (subtle.ConstantTimeCompare returns at once on unequal
// lengths).
func secretEqual(got, want string) bool {
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1
}

// hmacMatches compares a hex HMAC-SHA256 of body with sig in constant time.
func hmacMatches(secret string, body []byte, sig string, present bool) bool {
	if !present || sig == "" {
		return false
	}
	got, err := hex.DecodeString(sig)
	if err != nil {
		return false
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return hmac.Equal(got, mac.Sum(nil))
}

// eventOf is the event a request announces, from its provider's header.
func eventOf(provider Provider, h http.Header) string {
	name := map[Provider]string{GitHub: "X-GitHub-Event", GitLab: "X-Gitlab-Event", Gitea: "X-Gitea-Event",
		Gogs: "X-Gogs-Event", BitbucketServer: "X-Event-Key"}[provider]
	return h.Get(name)
}

// isPushEvent reports whether an event header names a push (or tag push):
// only those are read leniently when the typed decoding refuses them.
func isPushEvent(provider Provider, event string) bool {
	switch provider {
	case GitHub, Gitea, Gogs:
		return event == "push"
	case GitLab:
		return event == "Push Hook" || event == "Tag Push Hook"
	case BitbucketServer:
		return event == "repo:refs_changed"
	}
	return false
}

// deliveryID is the provider's id of a delivery, for logs.
func deliveryID(h http.Header) string {
	for _, name := range []string{"X-GitHub-Delivery", "X-Gitea-Delivery", "X-Gogs-Delivery", "X-Gitlab-Event-UUID", "X-Request-Id"} {
		if id := h.Get(name); id != "" {
			return id
		}
	}
	return ""
}

// errUndecodable means a verified push whose payload has no ref or no
// repository URL plumb can read.
var errUndecodable = errors.New("the payload names no ref or no repository URL")

// lenientPush reads, from a verified push payload the provider's typed
// decoding refused (a GitHub-compatible sender's field of another type, say),
// only the fields plumb uses: the ref, the repository's URLs and the
// changed paths. A field plumb does not use can never fail a push.
func lenientPush(provider Provider, body []byte) (*Push, error) {
	var p map[string]any
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, err
	}
	push := &Push{Ref: str(p, "ref")}
	switch provider {
	case GitLab:
		push.URLs = []string{str(p, "project", "git_http_url"), str(p, "project", "git_ssh_url"), str(p, "project", "web_url"),
			str(p, "repository", "git_http_url"), str(p, "repository", "git_ssh_url"), str(p, "repository", "url")}
	case BitbucketServer:
		if changes, _ := p["changes"].([]any); len(changes) > 0 {
			if c, ok := changes[0].(map[string]any); ok {
				push.Ref = str(c, "refId")
			}
		}
		repo, _ := p["repository"].(map[string]any)
		links, _ := repo["links"].(map[string]any)
		push.URLs = linkHrefs(links)
	default: // GitHub and the senders that speak its format (Gitea, Gogs)
		for _, field := range []string{"clone_url", "ssh_url", "git_url", "html_url", "url"} {
			push.URLs = append(push.URLs, str(p, "repository", field))
		}
	}
	commits, _ := p["commits"].([]any)
	for _, c := range commits {
		commit, _ := c.(map[string]any)
		for _, field := range []string{"added", "removed", "modified"} {
			list, _ := commit[field].([]any)
			for _, item := range list {
				if s, ok := item.(string); ok {
					push.ChangedPaths = append(push.ChangedPaths, s)
				}
			}
		}
	}
	urls := push.URLs[:0]
	for _, u := range push.URLs {
		if u != "" {
			urls = append(urls, u)
		}
	}
	push.URLs = urls
	if push.Ref == "" || len(push.URLs) == 0 {
		return nil, errUndecodable
	}
	return push, nil
}

// str is the string at a path of nested objects ("" when there is none).
func str(m map[string]any, path ...string) string {
	var cur any = m
	for _, key := range path {
		obj, ok := cur.(map[string]any)
		if !ok {
			return ""
		}
		cur = obj[key]
	}
	s, _ := cur.(string)
	return s
}
