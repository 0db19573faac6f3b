package controller

import (
	"context"

	"go.uber.org/zap"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/reconcile"
)

// dependentEvents enqueues the Apps that depend on an App (through the
// cache's reconcile.DependencyIndex) when it is created or deleted, or when
// what they wait for changes: its Ready condition, its generation, or the
// revisions it read and applied. Dependents resume on that event, not by
// polling.
func dependentEvents(reader client.Reader, enqueue func(types.NamespacedName), log *zap.Logger) toolscache.ResourceEventHandler {
	dependents := func(obj any) {
		if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = tombstone.Obj
		}
		app, ok := obj.(*plumbv1.App)
		if !ok {
			return
		}
		list := &plumbv1.AppList{}
		if err := reader.List(context.Background(), list, client.MatchingFields{reconcile.DependencyIndex: client.ObjectKeyFromObject(app).String()}); err != nil {
			log.Warn("Could not find the Apps that depend on an App", zap.Stringer("app", client.ObjectKeyFromObject(app)), zap.Error(err))
			return
		}
		for i := range list.Items {
			if waitsForDependencies(&list.Items[i]) {
				enqueue(client.ObjectKeyFromObject(&list.Items[i]))
			}
		}
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    dependents,
		DeleteFunc: dependents,
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*plumbv1.App)
			n, ok2 := newObj.(*plumbv1.App)
			if ok1 && ok2 && readinessChanged(o, n) {
				dependents(n)
			}
		},
	}
}

// waitsForDependencies reports an App that may be waiting for the Apps it
// depends on: its last tick stopped for them, or it has a spec not applied
// yet. One that applied its current revision is not held by them, and
// needs no tick when they change.
func waitsForDependencies(app *plumbv1.App) bool {
	ready := apimeta.FindStatusCondition(app.Status.Conditions, plumbv1.ConditionReady)
	if ready == nil || app.Status.ObservedGeneration != app.Generation {
		return true
	}
	return reconcile.WaitingReason(ready.Reason)
}

// readinessChanged reports a change of what dependents wait for.
func readinessChanged(o, n *plumbv1.App) bool {
	before := apimeta.FindStatusCondition(o.Status.Conditions, plumbv1.ConditionReady)
	after := apimeta.FindStatusCondition(n.Status.Conditions, plumbv1.ConditionReady)
	if (before == nil) != (after == nil) {
		return true
	}
	if before != nil && (before.Status != after.Status || before.ObservedGeneration != after.ObservedGeneration) {
		return true
	}
	return o.Generation != n.Generation || o.Status.ObservedGeneration != n.Status.ObservedGeneration ||
		o.Status.LastAppliedRevision != n.Status.LastAppliedRevision || o.Status.LastAttemptedRevision != n.Status.LastAttemptedRevision
}
