package metrics

import (
	"net/http"
	"strings"
)

// apiVerbs are the values of the verb label of plumb_api_requests_total:
// the Kubernetes verb of each request the controller makes, plus
// "discovery" for requests outside any resource (/api, /apis, /version).
var apiVerbs = []string{"get", "list", "watch", "create", "update", "patch", "apply", "delete", "deletecollection", "discovery"}

// InstrumentTransport counts every request made through rt in
// plumb_api_requests_total, by verb and dry run. It is meant for
// rest.Config.WrapTransport, so that every client built from a config
// (also impersonated copies of it) is counted.
func (m *Metrics) InstrumentTransport(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		dryRun := "false"
		if req.URL.Query().Has("dryRun") {
			dryRun = "true"
		}
		m.apiRequests.WithLabelValues(APIVerb(req), dryRun).Inc()
		return rt.RoundTrip(req)
	})
}

// APIVerb is the Kubernetes verb of an API request, from its method, path,
// query and content type: a GET of a collection is "list" (or "watch" with
// watch=true), a PATCH with an apply content type is "apply".
func APIVerb(req *http.Request) string {
	named, ok := namesObject(req.URL.Path)
	if !ok {
		return "discovery"
	}
	switch req.Method {
	case http.MethodGet:
		switch {
		case req.URL.Query().Get("watch") == "true" || req.URL.Query().Get("watch") == "1":
			return "watch"
		case named:
			return "get"
		default:
			return "list"
		}
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		if strings.HasPrefix(req.Header.Get("Content-Type"), "application/apply-patch") {
			return "apply"
		}
		return "patch"
	case http.MethodDelete:
		if named {
			return "delete"
		}
		return "deletecollection"
	default:
		return "discovery"
	}
}

// namesObject parses a resource path (/api/v1/[namespaces/NS/]RESOURCE[/NAME[/SUB]]
// or /apis/GROUP/VERSION/...): ok is false for a path outside any resource
// (discovery), named is true when it names one object.
func namesObject(path string) (named, ok bool) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	var rest []string
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		rest = parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		rest = parts[3:]
	default:
		return false, false
	}
	// namespaces/NS/RESOURCE… is a namespaced resource; namespaces[/NS] is
	// the Namespace kind itself.
	if len(rest) >= 3 && rest[0] == "namespaces" && rest[2] != "status" && rest[2] != "finalize" {
		rest = rest[2:]
	}
	return len(rest) >= 2, true
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
