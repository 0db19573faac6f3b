package reconcile

import (
	"context"
	"time"

	fluxssa "github.com/fluxcd/pkg/ssa"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/plumb-dev/plumb/informers/compact"
	"github.com/plumb-dev/plumb/internal/notify"
	"github.com/plumb-dev/plumb/internal/source"
	"github.com/plumb-dev/plumb/ssa"
)

// The small interfaces the tick consumes; the packages source, informers and
// ssa implement them, and tests may substitute them.

// Reader is the Read phase (package source).
type Reader interface {
	Read(ctx context.Context, req source.Request) (*source.Result, error)
}

// Observer is the Observe phase's cache (package informers): Get serves
// compacted objects from the cache; Fetch reads one whole from the API
// server, for a drift that must be described.
type Observer interface {
	Ensure(app types.NamespacedName, gvks []schema.GroupVersionKind) error
	WaitForSync(ctx context.Context, gvks []schema.GroupVersionKind, namespaces []string) error
	WaitForResourceVersion(ctx context.Context, gvk schema.GroupVersionKind, namespace, rv string) error
	Get(gvk schema.GroupVersionKind, namespace, name string) (*compact.Object, error)
	Fetch(ctx context.Context, gvk schema.GroupVersionKind, namespace, name string) (*compact.Object, error)
	Release(app types.NamespacedName)
	// Partial reports a cache that holds only some of plumb's objects (a
	// sharded replica's): an object Get lacks is read with Fetch before it
	// is taken for absent.
	Partial() bool
}

// Applier asks the API server about ambiguous objects (one server-side
// dry-run), applies (one request per object) and prunes (package ssa).
type Applier interface {
	DryRun(ctx context.Context, obj *unstructured.Unstructured, live *compact.Object) (bool, *unstructured.Unstructured, error)
	ApplyDirect(ctx context.Context, objects []*unstructured.Unstructured, opts ssa.DirectOptions) ([]ssa.Applied, *fluxssa.ChangeSet, error)
	RemoveAdditions(ctx context.Context, obj *unstructured.Unstructured, patch []byte) (*unstructured.Unstructured, error)
	Prune(ctx context.Context, stale []*unstructured.Unstructured, owner ssa.Owner) (*fluxssa.ChangeSet, []ssa.Kept, error)
	Disown(ctx context.Context, obj *unstructured.Unstructured, owner ssa.Owner) error
	Denied(ctx context.Context, user string, accesses []ssa.Access) ([]string, error)
	// CreateHook, GetHook and DeleteHook run an ordered sync's hooks.
	CreateHook(ctx context.Context, obj *unstructured.Unstructured) (*unstructured.Unstructured, error)
	GetHook(ctx context.Context, gvk schema.GroupVersionKind, namespace, name string) (*unstructured.Unstructured, error)
	DeleteHook(ctx context.Context, gvk schema.GroupVersionKind, namespace, name string) error
}

// Credentials serves the Secrets Apps name for their source's credentials
// and verification keys (package credentials): Get records that app uses
// the Secret, Release that it uses none but those in keep.
type Credentials interface {
	Get(ctx context.Context, app types.NamespacedName, name string) (*corev1.Secret, error)
	Release(app types.NamespacedName, keep ...string)
}

// ClusterInfo tells what the cluster serves, for Helm's .Capabilities
// (package clusterinfo).
type ClusterInfo interface {
	Capabilities(ctx context.Context) (kubeVersion string, apiVersions []string, err error)
	Invalidate()
}

// EventRecorder records Kubernetes Events on the App (client-go's
// record.EventRecorder satisfies it).
type EventRecorder interface {
	Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any)
}

// Notifier hands events to the Notifications of the App's namespace
// (package notify). It must not block.
type Notifier interface {
	Notify(notify.Event)
}

// MetricsRecorder records the loop's metrics (package metrics).
type MetricsRecorder interface {
	ObserveTick(d time.Duration, failedPhase, reason string)
	// ObservePhaseFailure counts a phase failure that no tick reports:
	// health that a re-assessment alone found failed.
	ObservePhaseFailure(phase, reason string)
	ObservePhase(phase string, d time.Duration)
	ObserveChange(action string, n int)
	// ObserveSync counts a tick (not a suspended App's) by its trigger.
	ObserveSync(trigger string)
	// ObserveCommitToApplied records how long after its commit a revision
	// became live.
	ObserveCommitToApplied(d time.Duration)
	// ObserveHook records how a hook of an ordered sync ended (result
	// Succeeded or Failed) in its phase, and how long it ran.
	ObserveHook(phase, result string, d time.Duration)
}

// noMetrics records nothing.
type noMetrics struct{}

func (noMetrics) ObserveTick(time.Duration, string, string) {}
func (noMetrics) ObservePhase(string, time.Duration)        {}
func (noMetrics) ObservePhaseFailure(string, string)        {}
func (noMetrics) ObserveChange(string, int)                 {}
func (noMetrics) ObserveSync(string)                        {}
func (noMetrics) ObserveCommitToApplied(time.Duration)      {}
func (noMetrics) ObserveHook(string, string, time.Duration) {}
