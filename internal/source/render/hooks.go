package render

import (
	"strings"

	"github.com/plumb-dev/plumb/internal/source/manifest"
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
// hooks none of whose helm.sh/hook events is one of an install, upgrade,
// rollback or delete (test, its old name test-success, or names Helm does
// not know, such as Helm 2's test-failure; Helm reads them in any case).
// Helm creates them only when `helm test` is run, never on an install or
// an upgrade, so applying them as ordinary objects runs the test Pods with
// every sync and waits for them to be healthy. Other hooks are kept as
// they are (applied as ordinary objects).
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

// lifecycleHooks are the hook events of an install, an upgrade, a
// rollback or a delete: Helm runs a hook that names one of them then.
var lifecycleHooks = map[string]bool{
	"pre-install": true, "post-install": true, "pre-upgrade": true, "post-upgrade": true,
	"pre-rollback": true, "post-rollback": true, "pre-delete": true, "post-delete": true,
}

// isHelmTest reports whether a helm.sh/hook value names no lifecycle
// event (an empty value is no hook).
func isHelmTest(hook string) bool {
	if strings.TrimSpace(hook) == "" {
		return false
	}
	for _, event := range strings.Split(hook, ",") {
		if lifecycleHooks[strings.ToLower(strings.TrimSpace(event))] {
			return false
		}
	}
	return true
}
