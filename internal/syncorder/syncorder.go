// Package syncorder says where each rendered object goes in an ordered
// sync: whether it is a hook (run once per revision, in its phases) or an
// ordinary object, its wave, and how a hook is cleaned up. It reads Argo
// CD's annotations as Argo CD spells them, plumb's plumb.dev/ aliases of
// them, and Helm's hook annotations, mapped as Argo CD maps them, except
// that a Helm chart's first sync is told apart from later ones (Helm's
// install and upgrade). Unlike Argo CD, a value it cannot read (a wave
// that is not an integer, an unknown hook or delete policy, an alias that
// disagrees with the Argo CD annotation) is an error naming the object,
// never a silent default.
package syncorder

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Phase is a phase of a sync, or of an App's deletion.
type Phase string

// The phases, in the order a sync runs them. SyncFail runs instead of
// what is left when a sync fails; PreDelete and PostDelete run when the
// App is deleted, before and after its objects are.
const (
	PreSync    Phase = "PreSync"
	Sync       Phase = "Sync"
	PostSync   Phase = "PostSync"
	SyncFail   Phase = "SyncFail"
	PreDelete  Phase = "PreDelete"
	PostDelete Phase = "PostDelete"
)

// DeletePolicy says when a hook is deleted.
type DeletePolicy string

// The delete policies: after the hook succeeded, after it failed, or just
// before it is created again (the default).
const (
	HookSucceeded      DeletePolicy = "HookSucceeded"
	HookFailed         DeletePolicy = "HookFailed"
	BeforeHookCreation DeletePolicy = "BeforeHookCreation"
)

// The annotations read, by the name Argo CD gives them; plumb.dev/ names
// the same ones (AliasPrefix + the part after the slash).
const (
	AnnotationHook         = "argocd.argoproj.io/hook"
	AnnotationSyncWave     = "argocd.argoproj.io/sync-wave"
	AnnotationDeletePolicy = "argocd.argoproj.io/hook-delete-policy"
	AliasPrefix            = "plumb.dev/"

	HelmHook           = "helm.sh/hook"
	HelmHookWeight     = "helm.sh/hook-weight"
	HelmDeletePolicy   = "helm.sh/hook-delete-policy"
	HelmResourcePolicy = "helm.sh/resource-policy"
)

// skip is the hook value of an object that is never applied.
const skip = "Skip"

// Placement is where an object goes in a sync.
type Placement struct {
	// Hook says the object is a hook: created in its phases once per
	// revision, waited for, never inventoried or healed.
	Hook bool
	// Phases are a hook's phases, in the order a sync meets them. A hook
	// with none does not run in this sync (a Helm pre-install hook on a
	// later sync). An ordinary object is applied in Sync.
	Phases []Phase
	// Wave orders objects within a phase, lowest first (default 0).
	Wave int
	// DeletePolicies say when a hook is deleted (BeforeHookCreation when
	// none is given).
	DeletePolicies []DeletePolicy
	// Keep says the object is never pruned (helm.sh/resource-policy: keep).
	Keep bool
}

// In reports whether the placement runs in phase p: an ordinary object
// in Sync, a hook in its phases.
func (p Placement) In(phase Phase) bool {
	if !p.Hook {
		return phase == Sync
	}
	return slices.Contains(p.Phases, phase)
}

// Has reports whether a hook has the delete policy d.
func (p Placement) Has(d DeletePolicy) bool { return slices.Contains(p.DeletePolicies, d) }

// Place reads obj's placement for a sync; install says the sync is the
// App's first (Helm's pre-install and post-install hooks run only then,
// pre-upgrade and post-upgrade only after it). applied is false for an
// object that is never applied: a hook of Skip alone, or a Helm hook of
// events plumb never runs (pre-rollback, post-rollback). Helm's test
// hooks are left out before (render.LeaveOutHelmTests).
func Place(obj *unstructured.Unstructured, install bool) (p Placement, applied bool, err error) {
	fail := func(err error) (Placement, bool, error) {
		return Placement{}, false, fmt.Errorf("%s %s: %w", obj.GetKind(), nameOf(obj), err)
	}
	annotations := obj.GetAnnotations()
	hook, err := annotation(annotations, AnnotationHook)
	if err != nil {
		return fail(err)
	}
	helmHook := strings.TrimSpace(annotations[HelmHook])
	isHelmHook := hook == "" && helmHook != "" && helmHook != "crd-install" // Helm 2 marked CRDs so; they are ordinary objects
	switch {
	case hook != "":
		p.Hook = true
		phases, onlySkip, err := argoPhases(hook)
		if err != nil {
			return fail(err)
		}
		if onlySkip {
			return Placement{}, false, nil
		}
		p.Phases = phases
	case isHelmHook:
		p.Hook = true
		phases, known, err := helmPhases(helmHook, install)
		if err != nil {
			return fail(err)
		}
		if !known {
			return Placement{}, false, nil
		}
		p.Phases = phases
	}
	if p.Wave, err = wave(annotations); err != nil {
		return fail(err)
	}
	if p.Hook {
		if p.DeletePolicies, err = deletePolicies(annotations); err != nil {
			return fail(err)
		}
	}
	p.Keep = strings.TrimSpace(annotations[HelmResourcePolicy]) == "keep"
	return p, true, nil
}

// IsHook reports whether annotations make an object a hook (which, unlike
// an ordinary object, may be named by a generateName): an Argo CD hook or
// its alias (Skip alone aside), or a Helm hook (crd-install aside).
func IsHook(annotations map[string]string) bool {
	hook, err := annotation(annotations, AnnotationHook)
	if err != nil {
		return true // Place names the disagreement
	}
	if hook != "" {
		return strings.TrimSpace(hook) != skip
	}
	helm := strings.TrimSpace(annotations[HelmHook])
	return helm != "" && helm != "crd-install"
}

// annotation is the value of an Argo CD annotation, or of its plumb.dev/
// alias; both set to different values is an error.
func annotation(annotations map[string]string, name string) (string, error) {
	_, suffix, _ := strings.Cut(name, "/")
	alias := AliasPrefix + suffix
	argo, hasArgo := annotations[name]
	own, hasOwn := annotations[alias]
	argo, own = strings.TrimSpace(argo), strings.TrimSpace(own)
	if hasArgo && hasOwn && argo != own {
		return "", fmt.Errorf("%s is %q and %s is %q: give one, or the same value", name, argo, alias, own)
	}
	if hasOwn {
		return own, nil
	}
	return argo, nil
}

// argoPhases reads an Argo CD hook annotation: a comma-separated list of
// PreSync, Sync, PostSync, SyncFail, PreDelete, PostDelete and Skip
// (Skip with others is ignored, as Argo CD ignores it).
func argoPhases(value string) (phases []Phase, onlySkip bool, err error) {
	skipped := false
	for _, v := range csv(value) {
		switch Phase(v) {
		case PreSync, Sync, PostSync, SyncFail, PreDelete, PostDelete:
			if !slices.Contains(phases, Phase(v)) {
				phases = append(phases, Phase(v))
			}
		default:
			if v != skip {
				return nil, false, fmt.Errorf("hook %q: %s is none of PreSync, Sync, PostSync, SyncFail, PreDelete, PostDelete and Skip", value, strconv.Quote(v))
			}
			skipped = true
		}
	}
	sortPhases(phases)
	return phases, skipped && len(phases) == 0, nil
}

// helmPhases maps Helm's hook events onto phases: pre-install and
// pre-upgrade to PreSync, post-install and post-upgrade to PostSync (each
// only on the App's first sync, or only after it), pre-delete and
// post-delete to PreDelete and PostDelete. known is false when the events
// are only ones plumb never runs (pre-rollback, post-rollback, and the
// test events, as in `helm template` output committed to Git). An event
// Helm does not know is an error.
func helmPhases(value string, install bool) (phases []Phase, known bool, err error) {
	add := func(p Phase) {
		if !slices.Contains(phases, p) {
			phases = append(phases, p)
		}
	}
	for _, v := range csv(value) {
		switch v = strings.ToLower(v); v {
		case "pre-install", "pre-upgrade":
			known = true
			if (v == "pre-install") == install {
				add(PreSync)
			}
		case "post-install", "post-upgrade":
			known = true
			if (v == "post-install") == install {
				add(PostSync)
			}
		case "pre-delete":
			known = true
			add(PreDelete)
		case "post-delete":
			known = true
			add(PostDelete)
		case "pre-rollback", "post-rollback", "test", "test-success", "test-failure":
			// never run: plumb neither rolls back nor runs helm test
		default:
			return nil, false, fmt.Errorf("%s %q: %q is no Helm hook event plumb knows", HelmHook, value, v)
		}
	}
	sortPhases(phases)
	return phases, known, nil
}

// wave reads the sync wave, or a Helm hook's weight, as Argo CD does for
// any object (default 0).
func wave(annotations map[string]string) (int, error) {
	text, err := annotation(annotations, AnnotationSyncWave)
	if err != nil {
		return 0, err
	}
	name := AnnotationSyncWave
	if text == "" {
		text, name = strings.TrimSpace(annotations[HelmHookWeight]), HelmHookWeight
	}
	if text == "" {
		return 0, nil
	}
	w, err := strconv.Atoi(text)
	if err != nil {
		return 0, fmt.Errorf("%s %q is not an integer", name, text)
	}
	return w, nil
}

// deletePolicies reads a hook's delete policies, Argo CD's and Helm's
// (hook-succeeded, hook-failed, before-hook-creation); BeforeHookCreation
// when none is given.
func deletePolicies(annotations map[string]string) ([]DeletePolicy, error) {
	var out []DeletePolicy
	add := func(d DeletePolicy) {
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	argo, err := annotation(annotations, AnnotationDeletePolicy)
	if err != nil {
		return nil, err
	}
	for _, v := range csv(argo) {
		switch d := DeletePolicy(v); d {
		case HookSucceeded, HookFailed, BeforeHookCreation:
			add(d)
		default:
			return nil, fmt.Errorf("%s %q: %q is none of HookSucceeded, HookFailed and BeforeHookCreation", AnnotationDeletePolicy, argo, v)
		}
	}
	helm := annotations[HelmDeletePolicy]
	for _, v := range csv(helm) {
		switch strings.ToLower(v) {
		case "hook-succeeded":
			add(HookSucceeded)
		case "hook-failed":
			add(HookFailed)
		case "before-hook-creation":
			add(BeforeHookCreation)
		default:
			return nil, fmt.Errorf("%s %q: %q is none of hook-succeeded, hook-failed and before-hook-creation", HelmDeletePolicy, helm, v)
		}
	}
	if len(out) == 0 {
		out = []DeletePolicy{BeforeHookCreation}
	}
	return out, nil
}

// csv splits a comma-separated value, leaving out blanks.
func csv(value string) []string {
	var out []string
	for _, v := range strings.Split(value, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// order is the order in which a sync meets the phases.
var order = map[Phase]int{PreSync: 0, Sync: 1, PostSync: 2, SyncFail: 3, PreDelete: 4, PostDelete: 5}

func sortPhases(phases []Phase) {
	slices.SortFunc(phases, func(a, b Phase) int { return order[a] - order[b] })
}

// nameOf names an object by namespace/name, or its generateName.
func nameOf(obj *unstructured.Unstructured) string {
	name := obj.GetName()
	if name == "" {
		name = obj.GetGenerateName() + "*"
	}
	if ns := obj.GetNamespace(); ns != "" {
		return ns + "/" + name
	}
	return name
}
