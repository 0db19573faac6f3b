package render

import (
	"strings"

	"github.com/plumb-dev/plumb/source/manifest"
)

// HelmHookAnnotation is the annotation that makes a chart's template a
// Helm hook: a comma-separated list of the events it runs at.
const HelmHookAnnotation = "helm.sh/hook"

// LeftOut is a rendered object that is not applied, and why.
type LeftOut struct {
	ID manifest.ID
	// Source is the file it was rendered from.
	Source string
	// Reason says why, in a few words.
	Reason string
}

// LeaveOutHelmTests takes Helm's test hooks out of a chart's objects:
// those whose helm.sh/hook events are all test (or its old name,
// test-success). Helm creates them only when `helm test` is run, never on
// an install or an upgrade, so applying them as ordinary objects runs
// the test Pods with every sync and waits for them to be healthy. Other
// hooks are kept as they are (applied as ordinary objects).
func LeaveOutHelmTests(objects []manifest.Object) (kept []manifest.Object, left []LeftOut) {
	kept = objects[:0:0]
	for _, o := range objects {
		if isHelmTest(o.GetAnnotations()[HelmHookAnnotation]) {
			left = append(left, LeftOut{ID: manifest.IDOf(o.Unstructured), Source: o.Source.String(),
				Reason: "Helm test hooks (helm.sh/hook: test), which Helm creates only on helm test, never on an install or upgrade"})
			continue
		}
		kept = append(kept, o)
	}
	return kept, left
}

// isHelmTest reports whether a helm.sh/hook value lists test events only.
func isHelmTest(hook string) bool {
	if strings.TrimSpace(hook) == "" {
		return false
	}
	for _, event := range strings.Split(hook, ",") {
		switch strings.TrimSpace(event) {
		case "test", "test-success":
		default:
			return false
		}
	}
	return true
}
