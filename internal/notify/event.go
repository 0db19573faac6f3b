// Package notify tells the world what plumb did: drift episodes to webhooks,
// Slack and Alertmanager, and each revision's progress to GitHub, GitLab or
// Gitea as commit statuses, as the Notifications of an App's namespace say.
// Delivery is asynchronous: Notify never blocks a tick; each Notification
// has a bounded queue of its own, delivered in order, one request at a time,
// retried with backoff, so a sink that is down or slow holds back only
// itself. Tokens and sink addresses come from Secrets and never reach a log
// line, an error or a metric.
package notify

import (
	"time"

	"k8s.io/apimachinery/pkg/types"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

// Event is one thing that happened to an App.
type Event struct {
	// Kind is the event (DriftDetected, DriftResolved, RevisionPending,
	// RevisionSucceeded, RevisionFailed).
	Kind plumbv1.NotificationEvent `json:"kind"`
	// App is the App's namespace and name; AppLabels its labels, which
	// Notifications select on.
	App       types.NamespacedName `json:"-"`
	AppLabels map[string]string    `json:"-"`
	// Destination is the cluster the App deploys into, the name of its
	// kubeconfig Secret (empty: the cluster plumb runs in).
	Destination string `json:"destination,omitempty"`
	// Source is the App's repository URL, without credentials (commit
	// statuses find the repository from it).
	Source string `json:"source"`
	// Revision is what the App read, e.g. main@sha1:<40 hex>; Commit its
	// commit hash.
	Revision string `json:"revision"`
	Commit   string `json:"commit"`
	// Time is when plumb saw it.
	Time time.Time `json:"time"`
	// Phase and Reason say what failed (RevisionFailed).
	Phase  string `json:"phase,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Message says it in one line.
	Message string `json:"message"`
	// Objects are the objects that drifted (drift events), at most a few
	// dozen; Count is how many there were.
	Objects []DriftedObject `json:"objects,omitempty"`
	Count   int             `json:"count,omitempty"`
	// Healed is true when plumb put every drifted object back to Git's
	// state (driftPolicy heal); false when the drift is left in place.
	Healed bool `json:"healed"`
}

// DriftedObject is one object someone changed outside Git.
type DriftedObject struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
	// Deleted is true when the object was deleted.
	Deleted bool `json:"deleted,omitempty"`
	// Fields are the fields that differ, and who changed them.
	Fields []FieldChange `json:"fields,omitempty"`
}

// FieldChange is one field someone changed.
type FieldChange struct {
	// Path is the field, e.g. .spec.replicas.
	Path string `json:"path"`
	// Before is what Git says, After what was live ("" when absent); a
	// Secret's values are masked.
	Before string `json:"before,omitempty"`
	After  string `json:"after,omitempty"`
	// Manager, Operation and Time say who changed it, from managedFields.
	Manager   string     `json:"manager,omitempty"`
	Operation string     `json:"operation,omitempty"`
	Time      *time.Time `json:"time,omitempty"`
}

// appKey is the App's key as "namespace/name".
func (e *Event) appKey() string { return e.App.Namespace + "/" + e.App.Name }

// appWhere is the App's key, and its destination cluster when it has one.
func (e *Event) appWhere() string {
	if e.Destination != "" {
		return e.appKey() + " (cluster " + e.Destination + ")"
	}
	return e.appKey()
}
