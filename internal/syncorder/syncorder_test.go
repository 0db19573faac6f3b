package syncorder

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func object(annotations map[string]string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("batch/v1")
	u.SetKind("Job")
	u.SetNamespace("shop")
	u.SetGenerateName("migrate-")
	u.SetAnnotations(annotations)
	return u
}

func TestPlace(t *testing.T) {
	hook := func(wave int, phases ...Phase) Placement {
		return Placement{Hook: true, Phases: phases, Wave: wave, DeletePolicies: []DeletePolicy{BeforeHookCreation}}
	}
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		install     bool
		want        Placement
		applied     bool
	}{
		{"an ordinary object", nil, false, Placement{}, true},
		{"an ordinary object in a wave", map[string]string{AnnotationSyncWave: "-2"}, false, Placement{Wave: -2}, true},
		{"plumb's alias of the wave", map[string]string{"plumb.dev/sync-wave": "3"}, false, Placement{Wave: 3}, true},
		{"both spellings agreeing", map[string]string{AnnotationSyncWave: "3", "plumb.dev/sync-wave": " 3 "}, false, Placement{Wave: 3}, true},
		{"a PreSync hook", map[string]string{AnnotationHook: "PreSync"}, false, hook(0, PreSync), true},
		{"hooks of two phases, in sync order", map[string]string{AnnotationHook: "PostSync, PreSync"}, false, hook(0, PreSync, PostSync), true},
		{"a Sync hook in a wave", map[string]string{"plumb.dev/hook": "Sync", AnnotationSyncWave: "5"}, false, hook(5, Sync), true},
		{"SyncFail", map[string]string{AnnotationHook: "SyncFail"}, false, hook(0, SyncFail), true},
		{"Skip alone is never applied", map[string]string{AnnotationHook: "Skip"}, false, Placement{}, false},
		{"Skip with another is that other", map[string]string{AnnotationHook: "Skip,PostSync"}, false, hook(0, PostSync), true},
		{"delete policies, Argo's and Helm's", map[string]string{AnnotationHook: "PreSync", AnnotationDeletePolicy: "HookSucceeded", HelmDeletePolicy: "hook-failed,hook-succeeded"}, false,
			Placement{Hook: true, Phases: []Phase{PreSync}, DeletePolicies: []DeletePolicy{HookSucceeded, HookFailed}}, true},
		{"Helm pre-install on the first sync", map[string]string{HelmHook: "pre-install", HelmHookWeight: "-5"}, true, hook(-5, PreSync), true},
		{"Helm pre-install on a later sync", map[string]string{HelmHook: "pre-install"}, false, hook(0), true},
		{"Helm pre-upgrade on the first sync", map[string]string{HelmHook: "pre-upgrade"}, true, hook(0), true},
		{"Helm pre-upgrade on a later sync", map[string]string{HelmHook: "pre-upgrade"}, false, hook(0, PreSync), true},
		{"Helm pre-install,pre-upgrade always", map[string]string{HelmHook: "pre-install,pre-upgrade"}, false, hook(0, PreSync), true},
		{"Helm post-install,post-upgrade", map[string]string{HelmHook: "post-install, post-upgrade"}, true, hook(0, PostSync), true},
		{"Helm delete hooks", map[string]string{HelmHook: "pre-delete,post-delete"}, false, hook(0, PreDelete, PostDelete), true},
		{"Helm rollback hooks never run", map[string]string{HelmHook: "pre-rollback"}, false, Placement{}, false},
		{"Helm test hooks never run", map[string]string{HelmHook: "test"}, false, Placement{}, false},
		{"Helm 2's crd-install is an ordinary object", map[string]string{HelmHook: "crd-install"}, false, Placement{}, true},
		{"an Argo hook wins over Helm's", map[string]string{AnnotationHook: "PostSync", HelmHook: "pre-install"}, true, hook(0, PostSync), true},
		{"the sync wave wins over Helm's weight", map[string]string{HelmHook: "pre-upgrade", HelmHookWeight: "1", AnnotationSyncWave: "2"}, false, hook(2, PreSync), true},
		{"kept from pruning", map[string]string{HelmResourcePolicy: "keep"}, false, Placement{Keep: true}, true},
	} {
		got, applied, err := Place(object(tc.annotations), tc.install)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if applied != tc.applied {
			t.Errorf("%s: applied %v, want %v", tc.name, applied, tc.applied)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}

// What plumb cannot read is an error naming the object, not a default
// that would apply it out of order.
func TestPlaceRefusesWhatItCannotRead(t *testing.T) {
	for name, tc := range map[string]struct {
		annotations map[string]string
		says        string
	}{
		"a wave that is no integer":   {map[string]string{AnnotationSyncWave: "1O"}, `argocd.argoproj.io/sync-wave "1O" is not an integer`},
		"a weight that is no integer": {map[string]string{HelmHook: "pre-upgrade", HelmHookWeight: "high"}, `helm.sh/hook-weight "high"`},
		"an unknown hook":             {map[string]string{AnnotationHook: "Presync"}, `"Presync" is none of PreSync`},
		"an unknown Helm event":       {map[string]string{HelmHook: "pre-instal"}, `"pre-instal" is no Helm hook event`},
		"an unknown delete policy":    {map[string]string{AnnotationHook: "PreSync", AnnotationDeletePolicy: "OnSuccess"}, `"OnSuccess" is none of`},
		"an unknown Helm policy":      {map[string]string{HelmHook: "pre-upgrade", HelmDeletePolicy: "never"}, `"never" is none of`},
		"aliases that disagree":       {map[string]string{AnnotationHook: "PreSync", "plumb.dev/hook": "PostSync"}, `plumb.dev/hook is "PostSync"`},
	} {
		_, _, err := Place(object(tc.annotations), false)
		if err == nil || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), "Job shop/migrate-*") {
			t.Errorf("%s: %v, want an error naming Job shop/migrate-* and saying %s", name, err, tc.says)
		}
	}
}

func TestPlacementIn(t *testing.T) {
	ordinary := Placement{Wave: 1}
	if !ordinary.In(Sync) || ordinary.In(PreSync) {
		t.Error("an ordinary object is applied in Sync only")
	}
	h := Placement{Hook: true, Phases: []Phase{PreSync, PostSync}}
	if !h.In(PreSync) || !h.In(PostSync) || h.In(Sync) {
		t.Error("a hook runs in its phases only")
	}
}
