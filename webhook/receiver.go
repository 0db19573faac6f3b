package webhook

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	bitbucketserver "github.com/go-playground/webhooks/v6/bitbucket-server"
	"github.com/go-playground/webhooks/v6/gitea"
	"github.com/go-playground/webhooks/v6/github"
	"github.com/go-playground/webhooks/v6/gitlab"
	"github.com/go-playground/webhooks/v6/gogs"
	gogsclient "github.com/gogits/go-gogs-client"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// Provider names a Git host or a registry whose push webhooks plumb
// understands.
type Provider string

// The providers, each served at /hooks/<provider>.
const (
	GitHub          Provider = "github"
	GitLab          Provider = "gitlab"
	Gitea           Provider = "gitea"
	Gogs            Provider = "gogs"
	BitbucketServer Provider = "bitbucket-server"
)

// Providers lists every provider.
var Providers = []Provider{GitHub, GitLab, Gitea, Gogs, BitbucketServer, Harbor, DockerHub, Quay}

// DefaultMaxBodyBytes caps a payload before anything reads it.
const DefaultMaxBodyBytes = 1 << 20

// deliveryMemory is how long a GitHub delivery id is remembered, so that a
// redelivery is recognised.
const deliveryMemory = time.Hour

// Options configure a Receiver.
type Options struct {
	// Secrets holds the secret of each provider to serve. A provider is
	// served only when its secret is set: the library would skip signature
	// checks with an empty one, so plumb refuses to.
	Secrets map[Provider]string
	// MaxBodyBytes caps payloads (default DefaultMaxBodyBytes).
	MaxBodyBytes int64
	// Index finds the Apps a push concerns.
	Index *Index
	// Trigger brings an App's next tick forward, fetching afresh.
	Trigger func(types.NamespacedName)
	// Observe, when set, is told of every request's provider, event and
	// status code, and of how many Apps a push matched (-1 for a request
	// that was no push to match: refused, a ping, ignored).
	Observe func(provider Provider, event string, code int, matched int)
	// Clock is the time source for delivery ids.
	Clock clock.PassiveClock
	// Log receives a warning for every verified request that is refused.
	Log *zap.Logger
}

// Receiver is the webhook HTTP handler.
type Receiver struct {
	opts    Options
	parsers map[Provider]parser
	secrets map[Provider]string

	mu         sync.Mutex
	deliveries map[string]time.Time // GitHub delivery id → when seen
}

// parser verifies a request and extracts the push it announces.
type parser func(r *http.Request) (event string, push *Push, err error)

// errPing marks a ping: verified, nothing to do.
var errPing = errors.New("ping")

// NewReceiver checks the options and prepares a parser per configured provider.
func NewReceiver(opts Options) (*Receiver, error) {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	if opts.Index == nil || opts.Trigger == nil {
		return nil, errors.New("webhook receiver: an Index and a Trigger are required")
	}
	rcv := &Receiver{opts: opts, parsers: map[Provider]parser{}, secrets: opts.Secrets, deliveries: map[string]time.Time{}}
	for provider, secret := range opts.Secrets {
		if secret == "" {
			return nil, fmt.Errorf("webhook receiver: provider %s has an empty secret; set one or leave the provider out", provider)
		}
		p, err := newParser(provider, secret)
		if err != nil {
			return nil, err
		}
		rcv.parsers[provider] = p
	}
	if len(rcv.parsers) == 0 {
		return nil, errors.New("webhook receiver: no provider has a secret")
	}
	return rcv, nil
}

// Served lists the providers the receiver answers, sorted.
func (rcv *Receiver) Served() []Provider {
	out := make([]Provider, 0, len(rcv.parsers))
	for p := range rcv.parsers {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Handler serves POST /hooks/<provider>.
func (rcv *Receiver) Handler() http.Handler {
	mux := http.NewServeMux()
	for provider, parse := range rcv.parsers {
		mux.Handle("/hooks/"+string(provider), rcv.handle(provider, parse))
		if urlSecret(provider) {
			mux.Handle("/hooks/"+string(provider)+"/", rcv.handle(provider, parse))
		}
	}
	return mux
}

func (rcv *Receiver) handle(provider Provider, parse parser) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		event, code, matched := "unknown", http.StatusAccepted, -1
		defer func() {
			if rcv.opts.Observe != nil {
				rcv.opts.Observe(provider, event, code, matched)
			}
		}()
		reply := func(c int, msg string) {
			code = c
			http.Error(w, msg, c)
		}
		if r.Method != http.MethodPost {
			reply(http.StatusMethodNotAllowed, "POST only")
			return
		}
		if r.ContentLength > rcv.opts.MaxBodyBytes {
			reply(http.StatusRequestEntityTooLarge, "payload too large")
			return
		}
		event = eventOf(provider, r.Header)
		data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, rcv.opts.MaxBodyBytes))
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			reply(http.StatusRequestEntityTooLarge, "payload too large")
			return
		case err != nil:
			reply(http.StatusBadRequest, "unreadable body")
			return
		case !verified(provider, rcv.secrets[provider], r, data):
			reply(http.StatusUnauthorized, "unauthorized") // no detail on why, whatever the event
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(data))
		ev, push, err := parse(r)
		event = ev
		if err != nil && isPushEvent(provider, eventOf(provider, r.Header)) &&
			!errors.Is(err, errPing) && !errors.Is(err, errUnauthorized) && !errors.Is(err, errIgnored) {
			// Verified, but the typed decoding refused it: read what plumb
			// uses, leniently.
			if lenient, lenientErr := lenientPush(provider, data); lenientErr == nil {
				push, err = lenient, nil
			} else {
				err = fmt.Errorf("%v; reading it leniently: %w", err, lenientErr)
			}
		}
		switch {
		case errors.Is(err, errPing):
			code = http.StatusOK
			_, _ = io.WriteString(w, "pong\n")
		case errors.Is(err, errUnauthorized):
			// plumb verified the signature, the library did not (a signature
			// in upper-case hex, say): say so in the log, not to the sender.
			rcv.opts.Log.Warn("Refused a verified webhook", zap.String("provider", string(provider)),
				zap.String("event", event), zap.String("delivery", deliveryID(r.Header)), zap.String("reason", err.Error()))
			reply(http.StatusUnauthorized, "unauthorized") // no detail on why
		case errors.Is(err, errIgnored):
			code = http.StatusAccepted
			w.WriteHeader(code)
			_, _ = io.WriteString(w, "ignored: not a push\n")
		case err != nil:
			rcv.opts.Log.Warn("Refused a verified webhook", zap.String("provider", string(provider)),
				zap.String("event", event), zap.String("delivery", deliveryID(r.Header)), zap.String("reason", err.Error()))
			reply(http.StatusBadRequest, "malformed payload")
		case rcv.redelivered(provider, r):
			code = http.StatusAccepted
			w.WriteHeader(code)
			_, _ = io.WriteString(w, "already received\n")
		default:
			keys := rcv.opts.Index.Match(*push)
			for _, key := range keys {
				rcv.opts.Trigger(key)
			}
			matched = len(keys)
			code = http.StatusAccepted
			w.WriteHeader(code)
			_, _ = fmt.Fprintf(w, "matched %d apps\n", matched)
		}
	})
}

// redelivered remembers GitHub delivery ids and recognises a repeat.
func (rcv *Receiver) redelivered(provider Provider, r *http.Request) bool {
	id := r.Header.Get("X-GitHub-Delivery")
	if provider != GitHub || id == "" {
		return false
	}
	now := rcv.opts.Clock.Now()
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	for seen, at := range rcv.deliveries {
		if now.Sub(at) > deliveryMemory {
			delete(rcv.deliveries, seen)
		}
	}
	if _, ok := rcv.deliveries[id]; ok {
		return true
	}
	if len(rcv.deliveries) < 100_000 { // bounded memory under a flood of ids
		rcv.deliveries[id] = now
	}
	return false
}

var (
	errUnauthorized = errors.New("unauthorized")
	errIgnored      = errors.New("ignored event")
)

// newParser builds a provider's parser with the library's verification.
func newParser(provider Provider, secret string) (parser, error) {
	switch provider {
	case GitHub:
		hook, err := github.New(github.Options.Secret(secret))
		if err != nil {
			return nil, err
		}
		return func(r *http.Request) (string, *Push, error) {
			event := r.Header.Get("X-GitHub-Event")
			if event == "package" || event == "registry_package" { // not in the library
				body, err := io.ReadAll(r.Body)
				if err != nil {
					return event, nil, err
				}
				push, err := githubPackagePush(body)
				return event, push, err
			}
			payload, err := hook.Parse(r, github.PushEvent, github.PingEvent)
			if err != nil {
				return event, nil, classify(err, github.ErrHMACVerificationFailed, github.ErrMissingHubSignatureHeader, github.ErrEventNotFound)
			}
			switch p := payload.(type) {
			case github.PingPayload:
				return event, nil, errPing
			case github.PushPayload:
				push := &Push{Ref: p.Ref, URLs: []string{p.Repository.CloneURL, p.Repository.SSHURL, p.Repository.GitURL, p.Repository.HTMLURL, p.Repository.URL}}
				for _, c := range p.Commits {
					push.ChangedPaths = changed(push.ChangedPaths, c.Added, c.Removed, c.Modified)
				}
				return event, push, nil
			}
			return event, nil, errIgnored
		}, nil
	case GitLab:
		hook, err := gitlab.New(gitlab.Options.Secret(secret))
		if err != nil {
			return nil, err
		}
		return func(r *http.Request) (string, *Push, error) {
			event := r.Header.Get("X-Gitlab-Event")
			payload, err := hook.Parse(r, gitlab.PushEvents, gitlab.TagEvents)
			if err != nil {
				return event, nil, classify(err, gitlab.ErrGitLabTokenVerificationFailed, nil, gitlab.ErrEventNotFound)
			}
			switch p := payload.(type) {
			case gitlab.PushEventPayload:
				push := &Push{Ref: p.Ref, URLs: gitlabURLs(p.Project, p.Repository)}
				for _, c := range p.Commits {
					push.ChangedPaths = changed(push.ChangedPaths, c.Added, c.Removed, c.Modified)
				}
				return event, push, nil
			case gitlab.TagEventPayload:
				return event, &Push{Ref: p.Ref, URLs: gitlabURLs(p.Project, p.Repository)}, nil
			}
			return event, nil, errIgnored
		}, nil
	case Gitea:
		hook, err := gitea.New(gitea.Options.Secret(secret))
		if err != nil {
			return nil, err
		}
		return func(r *http.Request) (string, *Push, error) {
			event := r.Header.Get("X-Gitea-Event")
			payload, err := hook.Parse(r, gitea.PushEvent)
			if err != nil {
				return event, nil, classify(err, gitea.ErrHMACVerificationFailed, gitea.ErrMissingGiteaSignatureHeader, gitea.ErrEventNotFound)
			}
			p, ok := payload.(gitea.PushPayload)
			if !ok || p.Repo == nil {
				return event, nil, errIgnored
			}
			push := &Push{Ref: p.Ref, URLs: []string{p.Repo.CloneURL, p.Repo.SSHURL, p.Repo.HTMLURL}}
			for _, c := range p.Commits {
				if c != nil {
					push.ChangedPaths = changed(push.ChangedPaths, c.Added, c.Removed, c.Modified)
				}
			}
			return event, push, nil
		}, nil
	case Gogs:
		hook, err := gogs.New(gogs.Options.Secret(secret))
		if err != nil {
			return nil, err
		}
		return func(r *http.Request) (string, *Push, error) {
			event := r.Header.Get("X-Gogs-Event")
			payload, err := hook.Parse(r, gogs.PushEvent)
			if err != nil {
				return event, nil, classify(err, gogs.ErrHMACVerificationFailed, gogs.ErrMissingGogsSignatureHeader, gogs.ErrEventNotFound)
			}
			p, ok := payload.(gogsclient.PushPayload)
			if !ok || p.Repo == nil {
				return event, nil, errIgnored
			}
			push := &Push{Ref: p.Ref, URLs: []string{p.Repo.CloneURL, p.Repo.SSHURL, p.Repo.HTMLURL}}
			for _, c := range p.Commits {
				if c != nil {
					push.ChangedPaths = changed(push.ChangedPaths, c.Added, c.Removed, c.Modified)
				}
			}
			return event, push, nil
		}, nil
	case BitbucketServer:
		hook, err := bitbucketserver.New(bitbucketserver.Options.Secret(secret))
		if err != nil {
			return nil, err
		}
		return func(r *http.Request) (string, *Push, error) {
			event := r.Header.Get("X-Event-Key")
			// The library slices the header without checking its length.
			if event != string(bitbucketserver.DiagnosticsPingEvent) && !strings.HasPrefix(r.Header.Get("X-Hub-Signature"), "sha256=") {
				return event, nil, errUnauthorized
			}
			payload, err := hook.Parse(r, bitbucketserver.RepositoryReferenceChangedEvent, bitbucketserver.DiagnosticsPingEvent)
			if err != nil {
				return event, nil, classify(err, bitbucketserver.ErrHMACVerificationFailed, bitbucketserver.ErrMissingHubSignatureHeader, bitbucketserver.ErrEventNotFound)
			}
			switch p := payload.(type) {
			case bitbucketserver.DiagnosticsPingPayload:
				return event, nil, errPing
			case bitbucketserver.RepositoryReferenceChangedPayload:
				if len(p.Changes) == 0 {
					return event, nil, errIgnored
				}
				// One payload may move several refs; each counts.
				push := &Push{Ref: p.Changes[0].ReferenceID, URLs: linkHrefs(p.Repository.Links)}
				return event, push, nil
			}
			return event, nil, errIgnored
		}, nil
	case Harbor, Quay:
		read := harborPush
		if provider == Quay {
			read = quayPush
		}
		return func(r *http.Request) (string, *Push, error) {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				return "", nil, err
			}
			return read(body)
		}, nil
	case DockerHub:
		return dockerHubPush, nil
	}
	return nil, fmt.Errorf("webhook receiver: unknown provider %q", provider)
}

// changed appends a commit's added, removed and modified paths.
func changed(paths []string, lists ...[]string) []string {
	for _, l := range lists {
		paths = append(paths, l...)
	}
	return paths
}

// classify maps a library error to unauthorized, ignored or malformed.
func classify(err, badSignature, missingSignature, unknownEvent error) error {
	switch {
	case errors.Is(err, badSignature), missingSignature != nil && errors.Is(err, missingSignature):
		return errUnauthorized
	case errors.Is(err, unknownEvent):
		return errIgnored
	}
	return err
}

// gitlabURLs are every URL a GitLab payload gives for its repository.
func gitlabURLs(p gitlab.Project, r gitlab.Repository) []string {
	return []string{p.GitHTTPURL, p.GitSSHURL, p.WebURL, r.GitHTTPURL, r.GitSSHURL, r.URL}
}

// linkHrefs collects the href values of Bitbucket Server's repository links.
func linkHrefs(links map[string]any) []string {
	var out []string
	for _, group := range links {
		items, _ := group.([]any)
		for _, item := range items {
			if m, ok := item.(map[string]any); ok {
				if href, ok := m["href"].(string); ok {
					out = append(out, href)
				}
			}
		}
	}
	return out
}
