package notify

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/repourl"
)

// StatusContext is the commit status context of an App: plumb/<namespace>/<name>.
func StatusContext(e *Event) string { return "plumb/" + e.appKey() }

var commitHash = regexp.MustCompile(`^[0-9a-f]{40}$`)

// commitStatusRequest posts the revision's state as a commit status: GitHub
// (POST /repos/{owner}/{repo}/statuses/{sha}), GitLab (POST
// /api/v4/projects/{path}/statuses/{sha}) or Gitea (POST
// /api/v1/repos/{owner}/{repo}/statuses/{sha}).
func commitStatusRequest(ctx context.Context, t plumbv1.SinkType, base *url.URL, token string, e *Event) (*http.Request, error) {
	if token == "" {
		return nil, errors.New("the Secret has no token")
	}
	if !commitHash.MatchString(e.Commit) {
		return nil, nil // no commit to put a status on
	}
	repo, err := repourl.OwnerPath(e.Source)
	if err != nil {
		return nil, err
	}
	state := map[plumbv1.NotificationEvent]string{
		plumbv1.EventRevisionPending: "pending", plumbv1.EventRevisionSucceeded: "success", plumbv1.EventRevisionFailed: "failure",
	}[e.Kind]
	if state == "" {
		return nil, nil
	}
	description := e.Message
	if runes := []rune(description); len(runes) > 140 { // GitHub's limit, in characters
		description = string(runes[:137]) + "..."
	}
	root := strings.TrimSuffix(base.String(), "/")
	var req *http.Request
	switch t {
	case plumbv1.SinkGitHub:
		req, err = jsonRequest(ctx, root+"/repos/"+repo+"/statuses/"+e.Commit,
			map[string]string{"state": state, "context": StatusContext(e), "description": description})
		if err == nil {
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("Accept", "application/vnd.github+json")
		}
	case plumbv1.SinkGitLab:
		if state == "failure" {
			state = "failed"
		}
		req, err = jsonRequest(ctx, root+"/api/v4/projects/"+url.PathEscape(repo)+"/statuses/"+e.Commit,
			map[string]string{"state": state, "name": StatusContext(e), "description": description})
		if err == nil {
			req.Header.Set("PRIVATE-TOKEN", token)
		}
	case plumbv1.SinkGitea:
		req, err = jsonRequest(ctx, root+"/api/v1/repos/"+repo+"/statuses/"+e.Commit,
			map[string]string{"state": state, "context": StatusContext(e), "description": description})
		if err == nil {
			req.Header.Set("Authorization", "token "+token)
		}
	default:
		return nil, errors.New("unknown sink type")
	}
	return req, err
}
