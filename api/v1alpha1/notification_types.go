package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Notification sends what plumb does with the Apps of its namespace to one
// sink: drift episodes (who changed what, and whether plumb put it back) to
// a chat, a webhook or Alertmanager, and each revision's progress to the Git
// host as a commit status. It lives in the namespace of the Apps it watches
// and reads its Secret there, so each team wires its own.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=plumb
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Suspended",type=boolean,JSONPath=`.spec.suspend`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Notification struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec says which events go where.
	Spec NotificationSpec `json:"spec"`

	// Status says whether the sink takes what is sent.
	// +optional
	Status NotificationStatus `json:"status,omitempty"`
}

// NotificationStatus is how delivery to the sink goes. It is written when
// that changes (a first delivery, a first failure, a recovery), not at
// every event.
type NotificationStatus struct {
	// Conditions: Ready is True (Delivered) once an event reached the sink,
	// False (DeliveryFailed) while deliveries fail, with why.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Reasons of a Notification's Ready condition.
const (
	ReasonDelivered      = "Delivered"
	ReasonDeliveryFailed = "DeliveryFailed"
)

// NotificationList is a list of Notifications.
//
// +kubebuilder:object:root=true
type NotificationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Notification `json:"items"`
}

// NotificationSpec says which events of which Apps go to which sink.
// +kubebuilder:validation:XValidation:rule="self.type in ['github', 'gitlab'] || has(self.address) || has(self.secretRef)",message="address (or a secretRef whose Secret has an address key) is required for this type"
// +kubebuilder:validation:XValidation:rule="!(self.type in ['github', 'gitlab', 'gitea']) || has(self.secretRef)",message="a commit status sink needs a secretRef whose Secret has a token key"
type NotificationSpec struct {
	// Type is the sink: webhook (a JSON POST, signed with HMAC-SHA256 when
	// the Secret has an hmacKey), slack (an incoming webhook), alertmanager
	// (its v2 API), or github, gitlab or gitea (commit statuses).
	// +kubebuilder:validation:Enum=webhook;slack;alertmanager;github;gitlab;gitea
	Type SinkType `json:"type"`

	// Address is the sink's URL: the endpoint of a webhook or Slack sink,
	// Alertmanager's base URL, or the Git host's API base for commit
	// statuses (default https://api.github.com for github and
	// https://gitlab.com for gitlab; required for gitea). An "address" key in
	// the Secret overrides it, for URLs that carry a token (Slack's do).
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://`
	// +optional
	Address string `json:"address,omitempty"`

	// SecretRef names a Secret in the Notification's namespace. Its keys:
	// "token" (the Git host's token for commit statuses, or a bearer token
	// for Alertmanager), "hmacKey" (signs webhook payloads) and "address".
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`

	// AppSelector picks the Apps of the namespace whose events are sent;
	// empty: all of them.
	// +optional
	AppSelector *metav1.LabelSelector `json:"appSelector,omitempty"`

	// Events picks the kinds of event sent. Empty: the sink's defaults,
	// which are the drift events for webhook, slack and alertmanager, and
	// the revision events for commit statuses (the only ones they take).
	// +listType=set
	// +kubebuilder:validation:MaxItems=5
	// +optional
	Events []NotificationEvent `json:"events,omitempty"`

	// Suspend stops sending (events that occur meanwhile are not kept).
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// SinkType is where a Notification sends.
type SinkType string

// The sink types.
const (
	SinkWebhook      SinkType = "webhook"
	SinkSlack        SinkType = "slack"
	SinkAlertmanager SinkType = "alertmanager"
	SinkGitHub       SinkType = "github"
	SinkGitLab       SinkType = "gitlab"
	SinkGitea        SinkType = "gitea"
)

// NotificationEvent is a kind of event a Notification sends.
// +kubebuilder:validation:Enum=DriftDetected;DriftResolved;RevisionPending;RevisionSucceeded;RevisionFailed
type NotificationEvent string

// The events.
const (
	// EventDriftDetected: objects of the App were changed outside Git (once
	// per episode: until the App's objects all match Git again).
	EventDriftDetected NotificationEvent = "DriftDetected"
	// EventDriftResolved: the episode ended (plumb put the objects back, or
	// someone else did, or Git changed to match).
	EventDriftResolved NotificationEvent = "DriftResolved"
	// EventRevisionPending: a tick is applying a revision the App had not
	// applied.
	EventRevisionPending NotificationEvent = "RevisionPending"
	// EventRevisionSucceeded: the App is Ready at the revision.
	EventRevisionSucceeded NotificationEvent = "RevisionSucceeded"
	// EventRevisionFailed: a phase failed for the revision.
	EventRevisionFailed NotificationEvent = "RevisionFailed"
)
