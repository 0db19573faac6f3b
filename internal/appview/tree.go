package appview

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

// Tree writes the App's inventory by namespace and kind, each object with
// its drift state (synced, drifted with the fields and who changed them,
// or kept after it left Git) and its kstatus health.
func Tree(w io.Writer, app *plumbv1.App) error {
	var b strings.Builder
	fmt.Fprintf(&b, "App %s/%s at %s\n", app.Namespace, app.Name, orDash(app.Status.LastAppliedRevision))
	namespaces := InventoryOf(app)
	if len(namespaces) == 0 {
		b.WriteString("└── (no objects applied yet)\n")
	}
	for i, ns := range namespaces {
		lastNS := i == len(namespaces)-1
		b.WriteString(branch(lastNS) + ns.Namespace + "\n")
		for j, kind := range ns.Kinds {
			lastKind := j == len(ns.Kinds)-1
			b.WriteString(indent(lastNS) + branch(lastKind) + kind.Kind + "\n")
			for k, o := range kind.Objects {
				b.WriteString(indent(lastNS) + indent(lastKind) + branch(k == len(kind.Objects)-1) + o.Name + "  " + o.Drift + "  " + o.Health + "\n")
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// InventoryNamespace is one namespace of an App's inventory
// ("(cluster-scoped)" for the cluster's own objects), its kinds sorted.
type InventoryNamespace struct {
	Namespace string
	Kinds     []InventoryKind
}

// InventoryKind is one kind (Kind[.group]) of an inventory namespace, its
// objects sorted by name.
type InventoryKind struct {
	Kind    string
	Objects []InventoryObject
}

// InventoryObject is one object of the inventory with its drift state and
// health, as text, and whether either is bad.
type InventoryObject struct {
	Name, Drift, Health string
	Drifted, Unhealthy  bool
}

// InventoryOf is the App's inventory by namespace and kind, each object
// with its drift state and health (Tree writes it).
func InventoryOf(app *plumbv1.App) []InventoryNamespace {
	if app.Status.Inventory == nil {
		return nil
	}
	drifted := map[string]plumbv1.DriftedObject{}
	if app.Status.Drift != nil {
		for _, d := range app.Status.Drift.Objects {
			drifted[key(d.ObjectRef)] = d
		}
	}
	kept := map[string]plumbv1.KeptObject{}
	for _, k := range app.Status.Kept {
		kept[key(k.ObjectRef)] = k
	}
	unhealthy := map[string]plumbv1.UnhealthyObject{}
	if app.Status.Health != nil {
		for _, u := range app.Status.Health.Unhealthy {
			unhealthy[key(u.ObjectRef)] = u
		}
	}
	// namespace → kind → objects
	groups := map[string]map[string][]InventoryObject{}
	all := listsAll(app)
	for _, e := range app.Status.Inventory.Entries {
		ns := e.Namespace
		if ns == "" {
			ns = "(cluster-scoped)"
		}
		kind := e.Kind
		if e.Group != "" {
			kind += "." + e.Group
		}
		if groups[ns] == nil {
			groups[ns] = map[string][]InventoryObject{}
		}
		id := key(e.ObjectRef)
		o := InventoryObject{Name: e.Name}
		o.Drift, o.Health = stateOf(app, id, drifted, kept, unhealthy, all)
		_, o.Drifted = drifted[id]
		_, o.Unhealthy = unhealthy[id]
		groups[ns][kind] = append(groups[ns][kind], o)
	}
	var out []InventoryNamespace
	for _, ns := range sortedKeys(groups) {
		group := InventoryNamespace{Namespace: ns}
		for _, kind := range sortedKeys(groups[ns]) {
			objects := groups[ns][kind]
			sort.Slice(objects, func(a, c int) bool { return objects[a].Name < objects[c].Name })
			group.Kinds = append(group.Kinds, InventoryKind{Kind: kind, Objects: objects})
		}
		out = append(out, group)
	}
	return out
}

// stateOf is one object's drift state and health.
func stateOf(app *plumbv1.App, id string, drifted map[string]plumbv1.DriftedObject, kept map[string]plumbv1.KeptObject,
	unhealthy map[string]plumbv1.UnhealthyObject, all lists) (drift, health string) {
	switch d, isDrifted := drifted[id]; {
	case kept[id].Reason != "":
		drift = "kept (left Git: " + kept[id].Reason + ")"
	case isDrifted:
		drift = "drifted " + strings.Join(d.Fields, ", ")
		if len(d.Managers) > 0 {
			drift += " by " + strings.Join(d.Managers, ", ")
		}
	case !all.drift:
		drift = "drift unknown (the status lists only some drifted objects)"
	default:
		drift = "synced"
	}
	health = "-"
	switch u, ok := unhealthy[id]; {
	case ok:
		health = u.Status
		if u.Message != "" {
			health += ": " + OneLine(u.Message)
		}
	case app.Status.Health != nil && all.health:
		health = "Current"
	case app.Status.Health != nil:
		health = "health unknown (the status lists only some unhealthy objects)"
	}
	return drift, health
}

// lists says whether the App's status lists every drifted and every
// unhealthy object (the lists are capped; the counts are exact).
type lists struct{ drift, health bool }

func listsAll(app *plumbv1.App) lists {
	all := lists{drift: true, health: true}
	if app.Status.Drift.Unlisted() > 0 {
		all.drift = false
	}
	if app.Status.Health.Unlisted() > 0 {
		all.health = false
	}
	return all
}

// key identifies an object across versions of its kind.
func key(r plumbv1.ObjectRef) string { r.Version = ""; return r.String() }

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func branch(last bool) string {
	if last {
		return "└── "
	}
	return "├── "
}

func indent(last bool) string {
	if last {
		return "    "
	}
	return "│   "
}

// ErrTickFailed is the error of Outcome for a tick that did not converge.
var ErrTickFailed = errors.New("the tick did not converge the App")

// Outcome says what the tick that handled the App's last sync request
// did: its change set (when that tick changed objects) and the resulting
// revision, or, wrapping ErrTickFailed, which phase failed and why.
func Outcome(app *plumbv1.App) (string, error) {
	var b strings.Builder
	ready := apimeta.FindStatusCondition(app.Status.Conditions, plumbv1.ConditionReady)
	converged := ready != nil && ready.Status == metav1.ConditionTrue
	switch cs := app.Status.LastChangeSet; {
	case cs != nil && cs.SyncRequest != "" && cs.SyncRequest == app.Status.LastHandledSyncRequest:
		fmt.Fprintf(&b, "Changed %s: %d created, %d configured, %d deleted\n", Count(cs.Changed(), "object"), cs.Created, cs.Configured, cs.Deleted)
		for _, e := range cs.Entries {
			fmt.Fprintf(&b, "  %-10s  %s\n", e.Action, e.Object)
		}
		if more := cs.Unlisted(); more > 0 {
			fmt.Fprintf(&b, "  and %d more\n", more)
		}
	case !converged:
	case app.Status.Drift != nil && app.Status.Drift.Count > 0:
		fmt.Fprintf(&b, "Changed nothing; %s drifted from Git, left so (plumb diff shows them)\n", Count(int(app.Status.Drift.Count), "object"))
	default:
		b.WriteString("Changed nothing: the cluster already matched Git\n")
	}
	if converged {
		fmt.Fprintf(&b, "App %s/%s is Ready at %s\n", app.Namespace, app.Name, app.Status.LastAppliedRevision)
		return b.String(), nil
	}
	reason, message := "NoStatus", "the App has no Ready condition"
	if ready != nil {
		reason, message = ready.Reason, OneLine(ready.Message)
	}
	if phase := FailingPhase(app); phase != "" {
		return b.String(), fmt.Errorf("%w: %s (phase %s, reason %s)", ErrTickFailed, message, phase, reason)
	}
	return b.String(), fmt.Errorf("%w: Ready=%s, reason %s: %s", ErrTickFailed, readyOf(app), reason, message)
}
