package webhook

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/go-playground/webhooks/v6/docker"
)

// The registries whose push events plumb understands, each served at
// /hooks/<provider>. GitHub's container registry sends its package events
// through the GitHub provider.
const (
	// Harbor sends its "Auth Header" value as the Authorization header.
	Harbor Provider = "harbor"
	// DockerHub signs nothing: its secret is the last segment of the
	// webhook's URL, /hooks/dockerhub/<secret>.
	DockerHub Provider = "dockerhub"
	// Quay signs nothing either: /hooks/quay/<secret>.
	Quay Provider = "quay"
)

// urlSecret reports whether a provider's secret travels in the URL, for
// registries that cannot sign what they send.
func urlSecret(provider Provider) bool {
	return provider == DockerHub || provider == Quay
}

// MinURLSecretLength is the shortest secret of a provider whose secret is
// the URL's last segment: nothing else proves the sender.
const MinURLSecretLength = 16

// CheckSecret refuses a secret that the provider cannot be served with:
// one of Docker Hub or Quay must be a URL path segment of its own, of
// unreserved characters (RFC 3986) that are not "." or "..", and at least
// MinURLSecretLength long.
func CheckSecret(provider Provider, secret string) error {
	if !urlSecret(provider) {
		return nil
	}
	if len(secret) < MinURLSecretLength {
		return fmt.Errorf("the %s webhook secret is its URL's last segment, the only proof of the sender: give at least %d characters", provider, MinURLSecretLength)
	}
	if strings.Trim(secret, ".") == "" || strings.TrimFunc(secret, unreserved) != "" {
		return fmt.Errorf("the %s webhook secret is its URL's last segment: use only letters, digits, '-', '.', '_' and '~'", provider)
	}
	return nil
}

func unreserved(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-._~", r)
}

// Artifact is a tag a registry says was pushed: the repository as the
// registry spells it (host/path) and the tag.
type Artifact struct {
	Repository string
	Tag        string
}

// secretInPath compares the last segment of /hooks/<provider>/<secret>
// with the secret in constant time.
func secretInPath(provider Provider, secret string, r *http.Request) bool {
	got, ok := strings.CutPrefix(r.URL.Path, "/hooks/"+string(provider)+"/")
	return ok && got != "" && secretEqual(got, secret)
}

// harborPayload is what plumb reads of a Harbor webhook (its default
// payload format, not CloudEvents).
type harborPayload struct {
	Type      string `json:"type"`
	EventData struct {
		Resources []struct {
			Tag         string `json:"tag"`
			ResourceURL string `json:"resource_url"`
		} `json:"resources"`
	} `json:"event_data"`
}

// harborPush reads a Harbor event: PUSH_ARTIFACT names the pushed tags by
// their resource URLs (host/project/repository:tag); any other event type
// is ignored.
func harborPush(body []byte) (string, *Push, error) {
	var p harborPayload
	if err := json.Unmarshal(body, &p); err != nil {
		return "", nil, err
	}
	if p.Type != "PUSH_ARTIFACT" {
		return p.Type, nil, errIgnored
	}
	push := &Push{}
	for _, res := range p.EventData.Resources {
		repo := withoutTag(res.ResourceURL)
		if repo != "" && res.Tag != "" && !strings.HasPrefix(res.Tag, "sha256:") {
			push.Artifacts = append(push.Artifacts, Artifact{Repository: repo, Tag: res.Tag})
		}
	}
	if len(push.Artifacts) == 0 {
		return p.Type, nil, errIgnored // a push by digest moves no tag
	}
	return p.Type, push, nil
}

// dockerHubPush reads a Docker Hub push with go-playground/webhooks: the
// repository (namespace/name, on docker.io) and the pushed tag.
func dockerHubPush(r *http.Request) (string, *Push, error) {
	hook, err := docker.New()
	if err != nil {
		return "", nil, err
	}
	payload, err := hook.Parse(r, docker.BuildEvent)
	if err != nil {
		return "push", nil, err
	}
	p, ok := payload.(docker.BuildPayload)
	if !ok || p.Repository.RepoName == "" || p.PushData.Tag == "" {
		return "push", nil, errUndecodable
	}
	return "push", &Push{Artifacts: []Artifact{{Repository: "docker.io/" + p.Repository.RepoName, Tag: p.PushData.Tag}}}, nil
}

// quayPayload is what plumb reads of a Quay "Push to Repository" event.
type quayPayload struct {
	DockerURL   string   `json:"docker_url"`
	UpdatedTags []string `json:"updated_tags"`
}

// quayPush reads a Quay push: the repository (host/namespace/name) and
// every tag it updated.
func quayPush(body []byte) (string, *Push, error) {
	var p quayPayload
	if err := json.Unmarshal(body, &p); err != nil {
		return "push", nil, err
	}
	if p.DockerURL == "" || len(p.UpdatedTags) == 0 {
		return "push", nil, errUndecodable
	}
	push := &Push{}
	for _, tag := range p.UpdatedTags {
		push.Artifacts = append(push.Artifacts, Artifact{Repository: p.DockerURL, Tag: tag})
	}
	return "push", push, nil
}

// githubPackage is what plumb reads of GitHub's package (and older
// registry_package) event.
type githubPackage struct {
	Action string `json:"action"`
	// Package is "package" in the package event and "registry_package" in
	// the older one; they hold the same fields.
	Package         *githubPackageFields `json:"package"`
	RegistryPackage *githubPackageFields `json:"registry_package"`
}

type githubPackageFields struct {
	Name           string `json:"name"`
	Namespace      string `json:"namespace"`
	PackageType    string `json:"package_type"`
	PackageVersion struct {
		PackageURL        string `json:"package_url"`
		ContainerMetadata struct {
			Tag struct {
				Name string `json:"name"`
			} `json:"tag"`
		} `json:"container_metadata"`
	} `json:"package_version"`
	Registry struct {
		URL string `json:"url"`
	} `json:"registry"`
}

// githubPackagePush reads a container package published or updated in
// GitHub's registry (ghcr.io): its repository and tag. Other package types
// and actions, and packages of other hosts (GitHub Enterprise Server's
// containers.<host>), are ignored.
func githubPackagePush(body []byte) (*Push, error) {
	var p githubPackage
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, err
	}
	pkg := p.Package
	if pkg == nil {
		pkg = p.RegistryPackage
	}
	if pkg == nil || (p.Action != "published" && p.Action != "updated") || !strings.EqualFold(pkg.PackageType, "container") {
		return nil, errIgnored
	}
	tag := pkg.PackageVersion.ContainerMetadata.Tag.Name
	if tag == "" {
		return nil, errIgnored // an untagged version
	}
	repo := withoutTag(pkg.PackageVersion.PackageURL) // ghcr.io/owner/name:tag
	if repo == "" {
		if pkg.Namespace == "" || pkg.Name == "" {
			return nil, errUndecodable
		}
		repo = githubRegistry + "/" + pkg.Namespace + "/" + pkg.Name
	}
	// GitHub's secret is every repository's Git webhook secret: what it
	// signs may wake Apps of GitHub's own registry, not of another host.
	if host, _, _ := strings.Cut(repo, "/"); !strings.EqualFold(host, githubRegistry) {
		return nil, errIgnored
	}
	return &Push{Artifacts: []Artifact{{Repository: repo, Tag: tag}}}, nil
}

// githubRegistry is the host of GitHub's container registry, the only one
// whose package events plumb reads.
const githubRegistry = "ghcr.io"

// withoutTag is host/path of host/path:tag or host/path@digest.
func withoutTag(ref string) string {
	if at := strings.LastIndex(ref, "@"); at >= 0 {
		ref = ref[:at]
	}
	if colon := strings.LastIndex(ref, ":"); colon > strings.LastIndex(ref, "/") {
		ref = ref[:colon]
	}
	return ref
}
