package v1alpha1

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// App tells plumb to keep a set of Kubernetes objects equal to what a folder of
// a Git repository says, tick after tick.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=plumb
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Health",type=string,JSONPath=`.status.conditions[?(@.type=="Healthy")].reason`,description="Healthy, Progressing or HealthCheckFailed: the kstatus health of the App's objects"
// +kubebuilder:printcolumn:name="Revision",type=string,JSONPath=`.status.lastAppliedRevision`
// +kubebuilder:printcolumn:name="Drift",type=integer,JSONPath=`.status.drift.count`,description="Objects whose live state differs from Git and was left so"
// +kubebuilder:printcolumn:name="Shard",type=string,JSONPath=`.status.shard`,description="The controller replica that ticks the App (with --shards=auto)"
// +kubebuilder:printcolumn:name="Destination",type=string,JSONPath=`.status.destination`,priority=1,description="The kubeconfig Secret of the cluster the App applies to (empty: the cluster plumb runs in)"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type App struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is what the App should converge to.
	Spec AppSpec `json:"spec"`

	// Status is what the controller last observed and did.
	// +optional
	Status AppStatus `json:"status,omitempty"`
}

// AppList is a list of Apps.
//
// +kubebuilder:object:root=true
type AppList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the Apps.
	Items []App `json:"items"`
}

// AppSpec is the desired behaviour of an App.
type AppSpec struct {
	// Source is where the desired state lives.
	Source Source `json:"source"`

	// Interval is the fallback timer: how long after a tick the next one runs
	// when no webhook or drift event brings it forward. At least 10s.
	// +kubebuilder:default="3m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10s')",message="interval must be at least 10s"
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`

	// Timeout bounds one tick (Read, Observe, Diff and Apply together).
	// Defaults to the interval.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s')",message="timeout must be at least 1s"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// TargetNamespace, when set, is the namespace of every namespaced object
	// that the source renders without one.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	TargetNamespace string `json:"targetNamespace,omitempty"`

	// ServiceAccountName is a ServiceAccount in the App's namespace that
	// every request touching the App's objects (dry-runs, applies, patches,
	// prunes) is made as, through impersonation: the API server's RBAC then
	// decides what the App may do. Without it the App uses the controller's
	// --default-service-account, or, when that is not set either, the
	// controller's own rights.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// Prune deletes the objects that left Git. Defaults to true.
	// +kubebuilder:default=true
	// +optional
	Prune *bool `json:"prune,omitempty"`

	// DriftPolicy says what a tick does when someone else changed an object
	// plumb applied: heal puts it back, alert only reports it.
	// +kubebuilder:default=heal
	// +optional
	DriftPolicy DriftPolicy `json:"driftPolicy,omitempty"`

	// Suspend stops ticks for this App until it is set back to false.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// AllowEmpty lets a source that renders no objects prune everything the
	// App applied before. Without it an empty render is refused (Ready=False),
	// because an emptied folder is far more often a mistake than an intent.
	// +optional
	AllowEmpty bool `json:"allowEmpty,omitempty"`

	// Force deletes and recreates an object when Git changes one of its
	// immutable fields. Without it only objects annotated
	// plumb.dev/force: enabled are recreated; others fail to apply.
	// +optional
	Force bool `json:"force,omitempty"`

	// Webhook tunes how Git push webhooks trigger this App.
	// +optional
	Webhook *WebhookSpec `json:"webhook,omitempty"`

	// Ignore lists fields that plumb leaves to others (e.g. spec.replicas of
	// a Deployment that an autoscaler scales): they are left out of what
	// plumb applies and never count as drift.
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	Ignore []IgnoreRule `json:"ignore,omitempty"`

	// Wait makes Ready mean healthy too: the App is Ready once its objects
	// are applied at the current revision and every one of them is Current
	// (kstatus). False makes it Ready once applied, whatever their health
	// (still reported in status.health and the Healthy condition). Defaults
	// to true.
	// +kubebuilder:default=true
	// +optional
	Wait *bool `json:"wait,omitempty"`

	// HealthTimeout is how long the App's objects may stay InProgress after
	// an apply changed them (or after they stopped being healthy) before
	// the App is Ready=False with reason HealthCheckFailed. An object that
	// is Failed fails the check at once. Defaults to 5m.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s')",message="healthTimeout must be at least 1s"
	// +optional
	HealthTimeout *metav1.Duration `json:"healthTimeout,omitempty"`

	// DependsOn lists Apps that must be Ready at their current revision
	// before this one applies anything (e.g. the App with a CRD and its
	// operator before the Apps of its custom resources). A dependency's
	// namespace defaults to this App's.
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	// +optional
	DependsOn []AppReference `json:"dependsOn,omitempty"`

	// Destination is the cluster the App's objects are applied to. Without
	// it they go to the cluster plumb runs in.
	// +optional
	Destination *Destination `json:"destination,omitempty"`

	// Helm configures rendering when source.path holds a Helm chart (a
	// Chart.yaml). A folder with a kustomization.yaml is built with
	// Kustomize, and any other folder is read as plain manifests.
	// +optional
	Helm *HelmSpec `json:"helm,omitempty"`
}

// Destination names another cluster for an App's objects.
type Destination struct {
	// KubeConfig is how plumb reaches the cluster: a self-contained
	// kubeconfig in a Secret of the App's own namespace. Its
	// current-context is used. It must hold its certificates and token
	// inline (no file paths), and no exec or auth-provider plugin unless the
	// controller allows them (--allow-kubeconfig-plugins). The Secret is
	// read again when it changes, so a rotated token is used from the next
	// tick on.
	KubeConfig KubeConfigReference `json:"kubeConfig"`
}

// SecretName is the name of the kubeconfig Secret of d, the destination's
// name in status, logs and metrics; empty when d is nil (plumb's own
// cluster).
func (d *Destination) SecretName() string {
	if d == nil {
		return ""
	}
	return d.KubeConfig.SecretRef.Name
}

// KubeConfigReference names the Secret that holds a kubeconfig.
type KubeConfigReference struct {
	// SecretRef is the Secret, in the App's namespace, and its key.
	SecretRef SecretKeyReference `json:"secretRef"`
}

// SecretKeyReference names one key of a Secret in the App's namespace.
type SecretKeyReference struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
	// Key of the Secret's data that holds the kubeconfig. Empty reads
	// "value", else "value.yaml" (Cluster API's convention).
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	// +optional
	Key string `json:"key,omitempty"`
}

// AppReference names an App.
type AppReference struct {
	// Name of the App.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
	// Namespace of the App; defaults to the namespace of the App that
	// refers to it.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	Namespace string `json:"namespace,omitempty"`
}

// WebhookSpec tunes how pushes trigger an App.
type WebhookSpec struct {
	// PathFilter skips pushes whose commits touched no file under
	// source.path (when the push lists the files it changed).
	// +optional
	PathFilter bool `json:"pathFilter,omitempty"`
}

// IgnoreRule selects objects by kind (and optionally group, namespace and
// name) and the fields of theirs that plumb ignores.
type IgnoreRule struct {
	// Group of the objects; empty is the core group.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Group string `json:"group,omitempty"`
	// Kind of the objects.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind"`
	// Namespace, when set, limits the rule to one namespace.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// Name, when set, limits the rule to one object.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Name string `json:"name,omitempty"`
	// Paths are JSON pointers (RFC 6901) to the ignored fields, e.g. /spec/replicas.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.all(p, p.startsWith('/') && size(p) > 1)",message="paths must be JSON pointers such as /spec/replicas"
	// +listType=atomic
	Paths []string `json:"paths"`
}

// HelmSpec configures how a chart is rendered: one in the Git repository
// or artifact, or the chart of a Helm source. Dependencies that are not
// vendored under charts/ are fetched in the Read phase from the
// repositories Chart.yaml names (at Chart.lock's versions when it has
// them); the chart is then rendered in a sandbox with no network, and
// `lookup` sees no cluster.
type HelmSpec struct {
	// ReleaseName is .Release.Name; defaults to the App's name.
	// +kubebuilder:validation:MaxLength=53
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	ReleaseName string `json:"releaseName,omitempty"`

	// ValuesFiles are values files in the repository, as paths relative to
	// its root (for a Helm source, files of the chart, relative to its
	// folder), merged in order over the chart's values.yaml.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="self.all(f, !f.startsWith('/') && !f.matches('(^|/)[.][.](/|$)'))",message="valuesFiles must be relative to the repository root and must not contain '..'"
	// +listType=atomic
	// +optional
	ValuesFiles []string `json:"valuesFiles,omitempty"`

	// Values are merged last, over the values files.
	// +optional
	Values *apiextensionsv1.JSON `json:"values,omitempty"`

	// Repositories are the accounts of the repositories that the chart's
	// dependencies come from, each from a Secret in the App's namespace;
	// a dependency from a repository not listed here is fetched
	// anonymously (or, from the Helm source's own repository, with its
	// secretRef).
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	Repositories []ChartRepository `json:"repositories,omitempty"`
}

// ChartRepository is the account of a repository that a chart's
// dependencies come from.
type ChartRepository struct {
	// URL is the repository as Chart.yaml names it: https://… (or
	// http://…), or oci://host/path for an OCI registry.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.startsWith('https://') || self.startsWith('http://') || self.startsWith('oci://')",message="url must be an https://, http:// or oci:// URL"
	URL string `json:"url"`

	// SecretRef names a Secret in the App's namespace: username and
	// password keys for an HTTP repository, a .dockerconfigjson key (a
	// kubernetes.io/dockerconfigjson Secret) for an OCI registry.
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`

	// Insecure reads an oci:// registry over plain HTTP. The controller
	// refuses it unless it runs with --allow-insecure-registries.
	// +optional
	Insecure bool `json:"insecure,omitempty"`
}

// ValuesMap decodes Values (nil when unset).
func (h *HelmSpec) ValuesMap() (map[string]any, error) {
	if h == nil || h.Values == nil || len(h.Values.Raw) == 0 {
		return nil, nil
	}
	var values map[string]any
	if err := json.Unmarshal(h.Values.Raw, &values); err != nil {
		return nil, fmt.Errorf("spec.helm.values must be an object: %w", err)
	}
	return values, nil
}

// DefaultInterval is the fallback timer's period when the spec sets none.
const DefaultInterval = 3 * time.Minute

// IntervalOrDefault is the fallback timer's period.
func (s AppSpec) IntervalOrDefault() time.Duration {
	if s.Interval == nil {
		return DefaultInterval
	}
	return s.Interval.Duration
}

// TimeoutOrDefault bounds one tick: the timeout, or else the interval.
func (s AppSpec) TimeoutOrDefault() time.Duration {
	if s.Timeout == nil {
		return s.IntervalOrDefault()
	}
	return s.Timeout.Duration
}

// DefaultHealthTimeout is how long objects may stay InProgress when the
// spec sets no healthTimeout.
const DefaultHealthTimeout = 5 * time.Minute

// HealthTimeoutOrDefault is how long the App's objects may stay InProgress.
func (s AppSpec) HealthTimeoutOrDefault() time.Duration {
	if s.HealthTimeout == nil {
		return DefaultHealthTimeout
	}
	return s.HealthTimeout.Duration
}

// WaitEnabled reports whether Ready waits for the App's objects to be
// healthy (the default when Wait is unset).
func (s AppSpec) WaitEnabled() bool {
	return s.Wait == nil || *s.Wait
}

// PruneEnabled reports whether the App prunes objects that left Git
// (the default when Prune is unset).
func (s AppSpec) PruneEnabled() bool {
	return s.Prune == nil || *s.Prune
}

// DriftPolicyOrDefault is the drift policy: heal unless the spec says
// alert (the API server defaults it to heal; an App made without defaulting
// heals too).
func (s AppSpec) DriftPolicyOrDefault() DriftPolicy {
	if s.DriftPolicy == DriftPolicyAlert {
		return DriftPolicyAlert
	}
	return DriftPolicyHeal
}

// DriftPolicy is what a tick does about drift.
// +kubebuilder:validation:Enum=heal;alert
type DriftPolicy string

const (
	// DriftPolicyHeal re-applies Git's state over someone else's change.
	DriftPolicyHeal DriftPolicy = "heal"
	// DriftPolicyAlert leaves the change in place and reports it.
	DriftPolicyAlert DriftPolicy = "alert"
)

// Source is where the desired state lives: a folder of a Git repository
// at a reference (git, with path), of an OCI artifact (oci, with path), a
// chart of a Helm repository (helm), or the objects of an S3-compatible
// bucket (bucket, with path). Exactly one kind is set. A Git source may
// also be written flat, as before git existed: url, ref and secretRef
// beside path (the same fields, read the same way), but not both ways.
// +kubebuilder:validation:XValidation:rule="[has(self.url) || has(self.git), has(self.oci), has(self.helm), has(self.bucket)].filter(x, x).size() == 1",message="source must set exactly one of git (or the flat url and ref of a Git repository), oci, helm and bucket"
// +kubebuilder:validation:XValidation:rule="!has(self.git) || !(has(self.url) || has(self.ref) || has(self.secretRef))",message="git holds the Git repository's url, ref and secretRef: set them in git or flat beside it, not both"
// +kubebuilder:validation:XValidation:rule="has(self.url) == has(self.ref)",message="a Git source sets url and ref together (an OCI source sets oci.ref, a Helm source helm.version)"
// +kubebuilder:validation:XValidation:rule="!has(self.secretRef) || has(self.url)",message="secretRef is the Git repository's credentials; an OCI, Helm or bucket source names its own in oci.secretRef, helm.secretRef or bucket.secretRef"
// +kubebuilder:validation:XValidation:rule="!has(self.helm) || !has(self.path)",message="path is not used by a Helm source: the chart is the archive's folder"
type Source struct {
	// Git reads a folder (path) of a Git repository at a reference.
	// +optional
	Git *GitSource `json:"git,omitempty"`

	// URL of the Git repository, the flat spelling of git.url.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.matches('^(https?|ssh)://[^/ ]+(/[^ ]*)?$') || self.matches('^file://[^ ]+$') || self.matches('^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[A-Za-z0-9._~/-][^ ]*$')",message="url must be https://, http://, ssh://, file:// or scp-like user@host:org/repo"
	// +optional
	URL string `json:"url,omitempty"`

	// Ref is the flat spelling of git.ref; set with url.
	// +optional
	Ref GitRef `json:"ref,omitzero"`

	// Path is the folder inside the repository or artifact that holds the
	// manifests, relative to its root. Empty means the root.
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/') && !self.matches('(^|/)[.][.](/|$)')",message="path must be relative to the repository root and must not contain '..'"
	// +optional
	Path string `json:"path,omitempty"`

	// SecretRef is the flat spelling of git.secretRef.
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`

	// OCI reads an artifact from an OCI registry in place of a Git
	// repository: a Flux artifact (`flux push artifact`), a Helm chart
	// pushed with `helm push`, or any image whose layer is a tar+gzip of
	// manifests.
	// +optional
	OCI *OCISource `json:"oci,omitempty"`

	// Helm reads a chart from a Helm repository (an index.yaml served over
	// HTTPS) or an OCI registry, in place of a Git repository, and renders
	// it with spec.helm's release name and values.
	// +optional
	Helm *HelmSource `json:"helm,omitempty"`

	// Bucket reads the objects under a prefix of an S3-compatible bucket
	// in place of a Git repository (path is then a folder of the prefix).
	// +optional
	Bucket *BucketSource `json:"bucket,omitempty"`
}

// Kind is the kind of source set: SourceKindGit, SourceKindOCI,
// SourceKindHelm or SourceKindBucket.
func (s Source) Kind() SourceKind {
	switch {
	case s.OCI != nil:
		return SourceKindOCI
	case s.Helm != nil:
		return SourceKindHelm
	case s.Bucket != nil:
		return SourceKindBucket
	}
	return SourceKindGit
}

// Location is where the source is read from, without credentials: the
// Git repository's URL, the OCI repository's, the Helm repository's, or
// s3://<endpoint>/<bucket>/<prefix>.
func (s Source) Location() string {
	switch {
	case s.OCI != nil:
		return s.OCI.URL
	case s.Helm != nil:
		return s.Helm.Repository
	case s.Bucket != nil:
		return strings.TrimSuffix("s3://"+s.Bucket.Endpoint+"/"+s.Bucket.Bucket+"/"+strings.Trim(s.Bucket.Prefix, "/"), "/")
	}
	return s.GitRepository().URL
}

// GitRepository is the Git source however it is spelled: git, or the flat
// url, ref and secretRef. It is empty (not nil) for another kind, whose
// Kind says which.
func (s Source) GitRepository() *GitSource {
	if s.Git != nil {
		return s.Git
	}
	return &GitSource{URL: s.URL, Ref: s.Ref, SecretRef: s.SecretRef}
}

// SetGitRef makes the Git source follow ref, in whichever spelling it is
// written.
func (s *Source) SetGitRef(ref GitRef) {
	if s.Git != nil {
		s.Git.Ref = ref
		return
	}
	s.Ref = ref
}

// GitSource is a Git repository at a reference, and its credentials.
type GitSource struct {
	// URL of the Git repository: https://, http:// (for local servers),
	// ssh://, scp-like user@host:org/repo, or file://.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.matches('^(https?|ssh)://[^/ ]+(/[^ ]*)?$') || self.matches('^file://[^ ]+$') || self.matches('^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[A-Za-z0-9._~/-][^ ]*$')",message="url must be https://, http://, ssh://, file:// or scp-like user@host:org/repo"
	URL string `json:"url"`

	// Ref is the branch, tag, semver range or commit to follow.
	Ref GitRef `json:"ref"`

	// SecretRef names a Secret in the App's namespace that holds the
	// credentials for the repository.
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`
}

// Verification is how the source's signatures are checked; nil when it
// asks for none.
func (s Source) Verification() *OCIVerification {
	switch {
	case s.OCI != nil:
		return s.OCI.Verify
	case s.Helm != nil:
		return s.Helm.Verify
	}
	return nil
}

// SourceKind names a kind of source.
type SourceKind string

const (
	// SourceKindGit is a Git repository (git, or the flat url and ref).
	SourceKindGit SourceKind = "git"
	// SourceKindOCI is an OCI artifact (oci).
	SourceKindOCI SourceKind = "oci"
	// SourceKindHelm is a chart of a Helm repository (helm).
	SourceKindHelm SourceKind = "helm"
	// SourceKindBucket is the objects of an S3-compatible bucket (bucket).
	SourceKindBucket SourceKind = "bucket"
)

// BucketSource is a folder (a prefix) of an S3-compatible bucket. Its
// revision is sha256:<digest of the keys and ETags>.
type BucketSource struct {
	// Endpoint is the S3 server, host[:port], without a scheme (e.g.
	// s3.amazonaws.com, minio.example.com:9000).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9.-]+(:[0-9]+)?$`
	Endpoint string `json:"endpoint"`

	// Bucket is the bucket's name.
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9.-]*[a-z0-9]$`
	Bucket string `json:"bucket"`

	// Prefix is the folder of the bucket to read; empty is all of it.
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/') && !self.matches('(^|/)[.][.](/|$)')",message="prefix must be a relative folder and must not contain '..'"
	// +optional
	Prefix string `json:"prefix,omitempty"`

	// Region is the bucket's region; empty is us-east-1.
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[a-z0-9-]*$`
	// +optional
	Region string `json:"region,omitempty"`

	// SecretRef names a Secret in the App's namespace with the accesskey
	// and secretkey keys (as Flux's Bucket takes them); without it the
	// bucket is read anonymously.
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`

	// Insecure reads the endpoint over plain HTTP. The controller refuses
	// it unless it runs with --allow-insecure-registries.
	// +optional
	Insecure bool `json:"insecure,omitempty"`
}

// HelmSource is a chart in a Helm repository: an HTTP repository (an
// index.yaml and the chart archives it lists) or an OCI registry (charts
// pushed with `helm push`).
// +kubebuilder:validation:XValidation:rule="!has(self.insecure) || !self.insecure || self.repository.startsWith('oci://')",message="insecure is for oci:// repositories; an HTTP repository over plain HTTP says http:// in its URL"
// +kubebuilder:validation:XValidation:rule="!has(self.verify) || (self.verify.provider == 'cosign') == self.repository.startsWith('oci://')",message="verify.provider is cosign for a chart in an OCI registry, helm (its provenance file) for one of an HTTP repository"
type HelmSource struct {
	// Repository is https://host/path (the folder of index.yaml), http://
	// (refused unless the controller runs with
	// --allow-insecure-registries), or oci://host/path (the chart is
	// oci://host/path/<chart>).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.matches('^https?://[^/?#@ ]+(/[^?#@ ]*)?$') || self.matches('^oci://[a-zA-Z0-9.-]+(:[0-9]+)?(/[a-z0-9]+([._/-]+[a-z0-9]+)*)?$')",message="repository must be https://host/path or oci://host/path, without credentials, a query or a fragment"
	Repository string `json:"repository"`

	// Chart is the chart's name in the repository.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=250
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9][a-zA-Z0-9._-]*$`
	Chart string `json:"chart"`

	// Version is a semver range such as ">=1.2 <2" or an exact version;
	// empty follows the highest stable version.
	// +kubebuilder:validation:MaxLength=255
	// +optional
	Version string `json:"version,omitempty"`

	// SecretRef names a Secret in the App's namespace that holds the
	// repository's credentials: username and password keys for an HTTP
	// repository (basic auth, sent only to the repository's own host),
	// a kubernetes.io/dockerconfigjson Secret for an OCI registry.
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`

	// Insecure reads an oci:// registry over plain HTTP. The controller
	// refuses it unless it runs with --allow-insecure-registries.
	// +optional
	Insecure bool `json:"insecure,omitempty"`

	// Verify checks the chart's signature before any of it is rendered: a
	// cosign signature for a chart in an OCI registry, its provenance file
	// (helm package --sign) for one of an HTTP repository. A version that
	// no trusted key signed is never applied, and the last verified one
	// stays.
	// +optional
	Verify *OCIVerification `json:"verify,omitempty"`
}

// OCISource is an artifact in an OCI registry.
// +kubebuilder:validation:XValidation:rule="!has(self.verify) || self.verify.provider == 'cosign'",message="an OCI artifact's verify.provider is cosign"
type OCISource struct {
	// URL of the repository: oci://host[:port]/path, without a tag or a
	// digest (they go in ref).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.matches('^oci://[a-zA-Z0-9.-]+(:[0-9]+)?/[a-z0-9]+([._/-]+[a-z0-9]+)*$')",message="url must be oci://host[:port]/repository, with the tag or digest in ref"
	URL string `json:"url"`

	// Ref is the tag, semver range over the tags, or manifest digest to
	// follow; the tag latest when empty.
	// +optional
	Ref OCIRef `json:"ref,omitzero"`

	// LayerSelector picks the layer to read by its media type. Without
	// it the first layer of a known content type is read: Flux's
	// content, a Helm chart, then a plain OCI or Docker tar+gzip layer.
	// Other layers (signatures, attestations, SBOMs) are ignored and not
	// downloaded.
	// +optional
	LayerSelector *OCILayerSelector `json:"layerSelector,omitempty"`

	// SecretRef names a Secret in the App's namespace of type
	// kubernetes.io/dockerconfigjson (as `kubectl create secret
	// docker-registry` makes) that holds the registry's credentials.
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`

	// Insecure reads the registry over plain HTTP. The controller refuses
	// it unless it runs with --allow-insecure-registries.
	// +optional
	Insecure bool `json:"insecure,omitempty"`

	// Verify checks the artifact's signature before any of it is read: a
	// revision that no trusted key signed is never applied, and the last
	// verified one stays.
	// +optional
	Verify *OCIVerification `json:"verify,omitempty"`
}

// OCIVerification names how an artifact's signature is checked.
type OCIVerification struct {
	// Provider of the signatures: cosign (its classic format, which
	// `cosign sign` writes: the tag sha256-<digest>.sig), or helm (a
	// chart's provenance file, <archive>.prov, which `helm package
	// --sign` writes; HTTP repositories only).
	// +kubebuilder:validation:Enum=cosign;helm
	Provider string `json:"provider"`

	// SecretRef names a Secret in the App's namespace whose keys hold the
	// trusted public keys: for cosign, keys ending in .pub (PEM, such as
	// cosign.pub); for helm, keys ending in .gpg or .asc (OpenPGP public
	// keyrings, binary or armored, as `gpg --export` writes them). A
	// signature by any of them verifies. Keyless (certificate identity)
	// verification is not supported.
	SecretRef LocalObjectReference `json:"secretRef"`
}

// The providers of OCIVerification.
const (
	VerifyProviderCosign = "cosign"
	VerifyProviderHelm   = "helm"
)

// OCIRef selects an artifact. At most one field is set.
// +kubebuilder:validation:XValidation:rule="[has(self.tag), has(self.semver), has(self.digest)].filter(x, x).size() <= 1",message="ref must set at most one of tag, semver or digest"
type OCIRef struct {
	// Tag follows one tag.
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$`
	// +optional
	Tag string `json:"tag,omitempty"`

	// SemVer follows the highest tag inside a semver range, e.g. ">=1.2.0 <2".
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	// +optional
	SemVer string `json:"semver,omitempty"`

	// Digest pins one manifest, sha256:<64 hex>.
	// +kubebuilder:validation:Pattern=`^sha256:[0-9a-f]{64}$`
	// +optional
	Digest string `json:"digest,omitempty"`
}

// OCILayerSelector picks an artifact's layer.
type OCILayerSelector struct {
	// MediaType of the layer to read, a tar+gzip of manifests.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	MediaType string `json:"mediaType"`
}

// GitRef selects a revision. Exactly one field is set.
// +kubebuilder:validation:XValidation:rule="[has(self.branch), has(self.tag), has(self.semver), has(self.commit)].filter(x, x).size() == 1",message="ref must set exactly one of branch, tag, semver or commit"
type GitRef struct {
	// Branch follows the head of a branch.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	// +optional
	Branch string `json:"branch,omitempty"`

	// Tag follows one tag.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	// +optional
	Tag string `json:"tag,omitempty"`

	// SemVer follows the highest tag inside a semver range, e.g. ">=1.2.0 <2".
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	// +optional
	SemVer string `json:"semver,omitempty"`

	// Commit pins one commit by its full SHA-1.
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{40}$`
	// +optional
	Commit string `json:"commit,omitempty"`
}

// LocalObjectReference names an object in the App's own namespace.
type LocalObjectReference struct {
	// Name of the object.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
}

// AppStatus is what the controller last observed and did. Only the
// controller writes it, once per tick.
type AppStatus struct {
	// ObservedGeneration is the generation of the spec that the last
	// successful tick converged.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions are kstatus conditions: Ready, Reconciling and Stalled,
	// and plumb's Drifted and Healthy.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// LastAttemptedRevision is the revision the last tick read, as
	// <branch or tag>@sha1:<40 hex>, or sha1:<40 hex> for a pinned commit.
	// +optional
	LastAttemptedRevision string `json:"lastAttemptedRevision,omitempty"`

	// LastAppliedRevision is the revision the cluster last converged to.
	// +optional
	LastAppliedRevision string `json:"lastAppliedRevision,omitempty"`

	// Phases holds the outcome of each phase of the tick, so an operator
	// sees which one fails and since when.
	// +optional
	Phases PhasesStatus `json:"phases,omitempty"`

	// Inventory lists the objects plumb applied for this App; prune deletes
	// those that are no longer in Git. It also lists the objects in Kept.
	// +optional
	Inventory *Inventory `json:"inventory,omitempty"`

	// Kept lists the objects that left Git but that the prune guard keeps
	// (a Namespace, a CRD, or an object annotated plumb.dev/prune: disabled),
	// each with why and what would let plumb prune it. They stay in the
	// inventory, keep the App's labels (no other App may take them without
	// a takeover annotation) and are pruned by the first tick after their
	// annotation allows it.
	// +listType=atomic
	// +optional
	Kept []KeptObject `json:"kept,omitempty"`

	// LastTickTime is when the last tick ended, successful or not.
	// +optional
	LastTickTime *metav1.Time `json:"lastTickTime,omitempty"`

	// LastSuccessfulTickTime is when the last successful tick ended.
	// +optional
	LastSuccessfulTickTime *metav1.Time `json:"lastSuccessfulTickTime,omitempty"`

	// Drift summarises the objects whose live state differs from Git.
	// +optional
	Drift *DriftSummary `json:"drift,omitempty"`

	// Health is the kstatus health of the App's objects, assessed from the
	// informer cache after each apply and whenever one of them changes
	// status.
	// +optional
	Health *HealthStatus `json:"health,omitempty"`

	// LastHandledSyncRequest is the value of the plumb.dev/sync-requested-at
	// annotation that the last tick handled.
	// +optional
	LastHandledSyncRequest string `json:"lastHandledSyncRequest,omitempty"`

	// LastChangeSet is what the last tick that changed objects did.
	// +optional
	LastChangeSet *ChangeSet `json:"lastChangeSet,omitempty"`

	// RecentTicks are the last ticks (at most 10, oldest first), with how
	// long each phase took: the dashboard's timeline. A tick that changed
	// nothing but times is written with the next status write (a heartbeat
	// at least every tenth tick), so the list may lag an idle App's
	// latest ticks, never lose them while one controller leads.
	// +kubebuilder:validation:MaxItems=10
	// +listType=atomic
	// +optional
	RecentTicks []TickRecord `json:"recentTicks,omitempty"`

	// Shard is the controller replica (its pod's name) that ticked the App
	// last, when the controller spreads Apps over replicas
	// (--shards=auto).
	// +optional
	Shard string `json:"shard,omitempty"`

	// Destination is the cluster the App's objects were last applied to:
	// the name of its kubeconfig Secret, or empty for the cluster plumb
	// runs in.
	// +optional
	Destination string `json:"destination,omitempty"`

	// DeleteHooks says the App's source, as last read, has delete hooks
	// (PreDelete or PostDelete): the App's finalizer reads its source
	// again and runs them around the prune. An App without them is
	// deleted without reading its source.
	// +optional
	DeleteHooks bool `json:"deleteHooks,omitempty"`

	// Sync is the App's last ordered sync: a sync of a revision whose
	// objects have hooks or more than one wave, run phase by phase and wave
	// by wave over as many ticks as its waits take. A tick that changes
	// nothing starts none.
	// +optional
	Sync *SyncStatus `json:"sync,omitempty"`
}

// SyncStatus is an ordered sync of a revision: its PreSync hooks, its
// waves of objects (and Sync hooks), its PostSync hooks, or on a failure
// its SyncFail hooks.
type SyncStatus struct {
	// Revision is the revision synced (the last one read of the same
	// content).
	Revision string `json:"revision"`

	// Content is a digest of what the sync applies: its objects, hooks
	// and waves as rendered. Another content (a commit that changes the
	// App's folder, a spec that changes the render) is another sync; the
	// same content of a later revision (a commit elsewhere in the
	// repository) is the same sync.
	// +optional
	Content string `json:"content,omitempty"`

	// Phase is the phase under way (PreSync, Sync, PostSync or SyncFail;
	// PreDelete or PostDelete while the App is deleted), or how the sync
	// ended (Succeeded or Failed).
	// +kubebuilder:validation:Enum=PreSync;Sync;PostSync;SyncFail;Succeeded;Failed;PreDelete;PostDelete
	Phase string `json:"phase"`

	// Wave is the wave of the phase under way: being applied, or waited
	// for until its objects are healthy and its hooks done.
	// +optional
	Wave *int32 `json:"wave,omitempty"`

	// Install says the sync is the App's first, when Helm's pre-install
	// and post-install hooks run (its pre-upgrade and post-upgrade ones run
	// on the later syncs).
	// +optional
	Install bool `json:"install,omitempty"`

	// StartedAt is when the sync started; FinishedAt when it ended.
	StartedAt metav1.Time `json:"startedAt"`
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`

	// Message says what the sync waits for, or how it ended.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Message string `json:"message,omitempty"`

	// Failure says what failed the sync: kept while its SyncFail hooks
	// run, and after.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Failure string `json:"failure,omitempty"`

	// WaitingSince is when the sync began to wait for the objects of the
	// wave under way to be healthy; past the App's healthTimeout the sync
	// fails, rather than wait for ever.
	// +optional
	WaitingSince *metav1.Time `json:"waitingSince,omitempty"`

	// FailingSince is when a deleted App's delete hooks began to fail to
	// run (its source unreadable, a right missing): past the App's timeout
	// they are given up, and its objects left in place.
	// +optional
	FailingSince *metav1.Time `json:"failingSince,omitempty"`

	// Hooks are the hooks the sync ran or runs, in the order it met them,
	// each once: a restart goes on from here and runs none twice.
	// +kubebuilder:validation:MaxItems=100
	// +listType=atomic
	// +optional
	Hooks []HookStatus `json:"hooks,omitempty"`
}

// The phases of a SyncStatus, and how it ends.
const (
	SyncPhasePreSync   = "PreSync"
	SyncPhaseSync      = "Sync"
	SyncPhasePostSync  = "PostSync"
	SyncPhaseSyncFail  = "SyncFail"
	SyncPhaseSucceeded = "Succeeded"
	SyncPhaseFailed    = "Failed"
	// The phases of a deleted App's delete hooks (run by its finalizer).
	SyncPhasePreDelete  = "PreDelete"
	SyncPhasePostDelete = "PostDelete"
)

// Done says the sync ended.
func (s *SyncStatus) Done() bool {
	return s != nil && (s.Phase == SyncPhaseSucceeded || s.Phase == SyncPhaseFailed)
}

// HookStatus is one hook of a sync.
type HookStatus struct {
	// ObjectRef names the hook as created (a generateName hook by the name
	// the API server gave it).
	ObjectRef `json:",inline"`

	// GenerateName is the hook's generateName in Git, for a hook that
	// gives none of its own.
	// +optional
	GenerateName string `json:"generateName,omitempty"`

	// Phase is the sync phase it ran in.
	Phase string `json:"phase"`

	// Wave is its wave in that phase.
	// +optional
	Wave int32 `json:"wave,omitempty"`

	// Status is Running, Succeeded or Failed.
	// +kubebuilder:validation:Enum=Running;Succeeded;Failed
	Status string `json:"status"`

	// Message says why it failed, or what it waits for.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Message string `json:"message,omitempty"`

	// StartedAt is when plumb created it; FinishedAt when it ended.
	StartedAt metav1.Time `json:"startedAt"`
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
}

// The outcomes of a HookStatus.
const (
	HookRunning   = "Running"
	HookSucceeded = "Succeeded"
	HookFailed    = "Failed"
)

// MaxRecentTicks is how many ticks status.recentTicks keeps.
const MaxRecentTicks = 10

// TickRecord is one tick: when it started, what brought it, how it ended
// and how long each phase took.
type TickRecord struct {
	// Start is when the tick began.
	Start metav1.Time `json:"start"`
	// Trigger is what brought it: spec, manual, webhook, timer, drift or
	// dependency.
	// +optional
	Trigger string `json:"trigger,omitempty"`
	// Revision is the revision it read.
	// +optional
	Revision string `json:"revision,omitempty"`
	// Result is Succeeded, Waiting (for a dependency) or the reason of the
	// phase that failed.
	Result string `json:"result"`
	// FailedPhase is the phase that failed: Read, Observe, Diff or Apply.
	// +optional
	FailedPhase string `json:"failedPhase,omitempty"`
	// Changed counts the objects the Apply phase created, configured or
	// deleted.
	// +optional
	Changed int32 `json:"changed,omitempty"`
	// ReadMillis, ObserveMillis, DiffMillis and ApplyMillis are how long
	// each phase took, in milliseconds; a phase that did not run has none.
	// +optional
	ReadMillis *int64 `json:"readMillis,omitempty"`
	// +optional
	ObserveMillis *int64 `json:"observeMillis,omitempty"`
	// +optional
	DiffMillis *int64 `json:"diffMillis,omitempty"`
	// +optional
	ApplyMillis *int64 `json:"applyMillis,omitempty"`
	// TotalMillis is how long the whole tick took.
	TotalMillis int64 `json:"totalMillis"`
	// Shard is the controller replica that ran the tick, when Apps are
	// spread over replicas (--shards=auto).
	// +optional
	Shard string `json:"shard,omitempty"`
}

// ChangeSet is what one tick's Apply phase changed: the objects it
// created, configured (changed, or put back after a drift) and deleted.
type ChangeSet struct {
	// Revision is the revision the tick applied.
	Revision string `json:"revision"`
	// Time is when the tick ended.
	Time metav1.Time `json:"time"`
	// SyncRequest is the plumb.dev/sync-requested-at value that this tick
	// answered, when a sync request brought it (`plumb sync --wait` looks
	// for its own).
	// +optional
	SyncRequest string `json:"syncRequest,omitempty"`
	// Created, Configured and Deleted count the objects (exact).
	// +optional
	Created int32 `json:"created,omitempty"`
	// +optional
	Configured int32 `json:"configured,omitempty"`
	// +optional
	Deleted int32 `json:"deleted,omitempty"`
	// Entries list the objects and what was done to each (at most 50; the
	// counts are exact).
	// +kubebuilder:validation:MaxItems=50
	// +listType=atomic
	// +optional
	Entries []ChangeSetEntry `json:"entries,omitempty"`
}

// ChangeSetEntry is one object a tick changed.
type ChangeSetEntry struct {
	// Object is Kind[.group]/[namespace/]name.
	Object string `json:"object"`
	// Action is created, configured or deleted.
	Action string `json:"action"`
}

// Metadata keys on the App itself.
const (
	// AnnotationSyncRequestedAt asks for a tick now (`plumb sync APP` sets it
	// to the current time); a tick that sees a new value reads Git afresh.
	AnnotationSyncRequestedAt = "plumb.dev/sync-requested-at"
	// AnnotationSyncRequestedBy says who asked for the sync that
	// AnnotationSyncRequestedAt records: "webhook" (the push receiver) or
	// "manual" (a person, the CLI or the dashboard; also assumed when the
	// annotation is absent). It only labels the sync in metrics and logs;
	// a request by hand that sets only sync-requested-at after a webhook's
	// keeps the receiver's mark (set this one to "manual" too).
	AnnotationSyncRequestedBy = "plumb.dev/sync-requested-by"
	// SyncRequestedByWebhook and SyncRequestedByManual are the values of
	// AnnotationSyncRequestedBy.
	SyncRequestedByWebhook = "webhook"
	SyncRequestedByManual  = "manual"
	// Finalizer lets plumb prune an App's objects (when prune is on) before
	// the App is gone.
	Finalizer = "plumb.dev/finalizer"
)

// PhasesStatus holds one PhaseStatus per phase of the tick.
type PhasesStatus struct {
	// Read fetches and renders the source.
	// +optional
	Read PhaseStatus `json:"read,omitempty"`
	// Observe takes the live state from the informer caches.
	// +optional
	Observe PhaseStatus `json:"observe,omitempty"`
	// Diff compares desired and live state.
	// +optional
	Diff PhaseStatus `json:"diff,omitempty"`
	// Apply applies the difference and prunes.
	// +optional
	Apply PhaseStatus `json:"apply,omitempty"`
}

// PhaseStatus is the recent history of one phase.
type PhaseStatus struct {
	// LastSuccessTime is when the phase last succeeded.
	// +optional
	LastSuccessTime *metav1.Time `json:"lastSuccessTime,omitempty"`

	// LastFailureTime is when the phase last failed.
	// +optional
	LastFailureTime *metav1.Time `json:"lastFailureTime,omitempty"`

	// LastError is the message of the last failure. Cleared on success.
	// +optional
	LastError string `json:"lastError,omitempty"`

	// Reason is a CamelCase word for the last failure, e.g. SourceUnavailable.
	// +optional
	Reason string `json:"reason,omitempty"`

	// ConsecutiveFailures counts failures since the last success.
	// +optional
	ConsecutiveFailures int32 `json:"consecutiveFailures,omitempty"`
}

// Inventory is the set of objects plumb applied for an App.
type Inventory struct {
	// Entries are the objects, in a stable order.
	// +listType=atomic
	// +optional
	Entries []InventoryEntry `json:"entries,omitempty"`
}

// InventoryEntry is one object of the inventory.
type InventoryEntry struct {
	ObjectRef `json:",inline"`

	// AppliedFields is a digest of the fields plumb owned on the object
	// right after it last wrote or confirmed it (its server-side apply
	// entry in managedFields). A restarted controller that finds plumb
	// owning the same fields, and the object's content hash unchanged,
	// knows the object is as plumb left it without asking the API server.
	// +optional
	AppliedFields string `json:"appliedFields,omitempty"`

	// Wave is the sync wave the object was applied in: a prune deletes
	// the higher waves first.
	// +optional
	Wave int32 `json:"wave,omitempty"`
}

// ObjectRef identifies one Kubernetes object.
type ObjectRef struct {
	// Group is the API group; empty for the core group.
	// +optional
	Group string `json:"group,omitempty"`
	// Version is the API version the object was applied with.
	Version string `json:"version"`
	// Kind is the object's kind.
	Kind string `json:"kind"`
	// Namespace is empty for cluster-scoped objects.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// Name is the object's name.
	Name string `json:"name"`
}

// String is the object as plumb names it in status, Events and the CLI:
// Kind[.group]/[namespace/]name.
func (r ObjectRef) String() string {
	kind := r.Kind
	if r.Group != "" {
		kind += "." + r.Group
	}
	if r.Namespace == "" {
		return kind + "/" + r.Name
	}
	return kind + "/" + r.Namespace + "/" + r.Name
}

// KeptObject is an object that left Git and that the prune guard keeps.
type KeptObject struct {
	ObjectRef `json:",inline"`

	// Reason is why it is kept: PruneDisabled (annotated
	// plumb.dev/prune: disabled), Namespace or CustomResourceDefinition
	// (kinds pruned only when annotated plumb.dev/prune: enabled).
	Reason string `json:"reason"`

	// Message says what would let plumb prune it.
	Message string `json:"message"`
}

// DriftSummary describes the objects whose live state differs from what
// plumb applied because someone else changed them.
type DriftSummary struct {
	// Count is the number of objects left drifted after the last tick
	// (healed objects do not count): 0 when there are none.
	Count int32 `json:"count"`

	// LastDetectedTime is when drift was last seen.
	// +optional
	LastDetectedTime *metav1.Time `json:"lastDetectedTime,omitempty"`

	// Objects lists the objects left drifted (at most a few dozen; Count is
	// exact).
	// +listType=atomic
	// +optional
	Objects []DriftedObject `json:"objects,omitempty"`
}

// DriftedObject is one object that someone else changed.
type DriftedObject struct {
	ObjectRef `json:",inline"`

	// Fields are JSON pointers to the fields that differ.
	// +listType=atomic
	// +optional
	Fields []string `json:"fields,omitempty"`

	// Managers are the field managers that changed them.
	// +listType=atomic
	// +optional
	Managers []string `json:"managers,omitempty"`

	// LeftTo are the fields left to a manager that kept changing them back
	// (reason DriftConflict): plumb neither applies them nor puts them
	// back until Git changes the object or the manager lets go of them.
	// +listType=atomic
	// +optional
	LeftTo []LeftField `json:"leftTo,omitempty"`
}

// LeftField is one field plumb left to another manager.
type LeftField struct {
	// Path is the field, e.g. .spec.replicas.
	Path string `json:"path"`
	// Manager is the field manager that keeps it.
	Manager string `json:"manager"`
	// Fields is the field as managedFields writes fields (a fieldsV1 set
	// holding it alone), so that `plumb diff` leaves it as the controller
	// does.
	Fields string `json:"fields"`
}

// HealthStatus counts the App's objects by kstatus status and names those
// that are not Current.
type HealthStatus struct {
	// Current counts the objects that are healthy (kinds without status
	// conventions are Current once applied).
	Current int32 `json:"current"`
	// InProgress counts the objects still rolling out.
	// +optional
	InProgress int32 `json:"inProgress,omitempty"`
	// Failed counts the objects whose rollout failed.
	// +optional
	Failed int32 `json:"failed,omitempty"`
	// Terminating counts the objects being deleted.
	// +optional
	Terminating int32 `json:"terminating,omitempty"`
	// NotFound counts the objects the cache does not hold.
	// +optional
	NotFound int32 `json:"notFound,omitempty"`
	// Unknown counts the objects whose status could not be read.
	// +optional
	Unknown int32 `json:"unknown,omitempty"`

	// WaitingSince is when the current wait for the objects to become
	// healthy began: the apply that changed them, or the moment one of them
	// stopped being Current. Unset while every object is Current.
	// +optional
	WaitingSince *metav1.Time `json:"waitingSince,omitempty"`

	// Unhealthy lists the objects that are not Current (at most 20; the
	// counts are exact), with their kstatus status and message.
	// +listType=atomic
	// +optional
	Unhealthy []UnhealthyObject `json:"unhealthy,omitempty"`
}

// UnhealthyObject is one object of an App that is not Current.
type UnhealthyObject struct {
	ObjectRef `json:",inline"`

	// Status is the kstatus status: InProgress, Failed, Terminating,
	// NotFound or Unknown.
	Status string `json:"status"`

	// Message is kstatus's message about the object (at most 256
	// characters).
	// +optional
	Message string `json:"message,omitempty"`
}

// Condition types that plumb sets on an App.
const (
	// ConditionReady is True when the last tick converged the App.
	ConditionReady = "Ready"
	// ConditionReconciling is True while a tick is under way or retrying.
	ConditionReconciling = "Reconciling"
	// ConditionStalled is True when the App cannot progress without a change
	// to its spec or source (for instance an invalid spec).
	ConditionStalled = "Stalled"
	// ConditionDrifted is True while live objects differ from Git.
	ConditionDrifted = "Drifted"
	// ConditionHealthy is True when every object of the App is Current
	// (kstatus), Unknown while some are still in progress, False when one
	// failed or the health timeout passed.
	ConditionHealthy = "Healthy"
	// ConditionSourceVerified is set on an App whose source asks for
	// verification: True with the key that verified the revision read,
	// False (ReasonVerificationFailed) when its signature did not verify.
	ConditionSourceVerified = "SourceVerified"
)

// Condition reasons, one per failure domain of the tick.
const (
	// ReasonSucceeded: the tick converged the App.
	ReasonSucceeded = "Succeeded"
	// ReasonReadFailed: fetching or rendering the source failed.
	ReasonReadFailed = "ReadFailed"
	// ReasonObserveFailed: the live state could not be observed.
	ReasonObserveFailed = "ObserveFailed"
	// ReasonClusterUnreachable: the App's destination cluster (another
	// cluster than plumb's, spec.destination) did not answer; its last
	// applied state is kept and nothing is pruned.
	ReasonClusterUnreachable = "ClusterUnreachable"
	// ReasonDiffFailed: desired and live state could not be compared.
	ReasonDiffFailed = "DiffFailed"
	// ReasonApplyFailed: the API server refused an apply.
	ReasonApplyFailed = "ApplyFailed"
	// ReasonPruneFailed: deleting objects that left Git failed.
	ReasonPruneFailed = "PruneFailed"
	// ReasonProgressing: applied, and waiting for objects to become
	// healthy (within spec.healthTimeout).
	ReasonProgressing = "Progressing"
	// ReasonHealthCheckFailed: an object failed, or objects were still in
	// progress when spec.healthTimeout passed.
	ReasonHealthCheckFailed = "HealthCheckFailed"
	// ReasonHealthy is the Healthy condition's reason when every object is
	// Current.
	ReasonHealthy = "Healthy"
	// ReasonDependencyNotReady: an App in spec.dependsOn is not Ready at
	// its current revision, or does not exist; nothing was applied.
	ReasonDependencyNotReady = "DependencyNotReady"
	// ReasonDependencyCycle: spec.dependsOn leads back to the App itself.
	ReasonDependencyCycle = "DependencyCycle"
	// ReasonDependencyNotAllowed: spec.dependsOn names an App of another
	// namespace that the App may not read (--no-cross-namespace, or its
	// ServiceAccount's RBAC), or reaches too many Apps.
	ReasonDependencyNotAllowed = "DependencyNotAllowed"
	// ReasonSuspended: the App is suspended.
	ReasonSuspended = "Suspended"
	// ReasonNotPruned is the Event that names the objects that left Git and
	// that the prune guard keeps (see AppStatus.Kept).
	ReasonNotPruned = "NotPruned"
	// ReasonLeftOut is the Event that names rendered objects that are not
	// applied (a Helm chart's test hooks), and why.
	ReasonLeftOut = "LeftOut"
	// ReasonApplied is the Event of a tick that changed objects, naming
	// what it created, configured and deleted.
	ReasonApplied = "Applied"
	// ReasonDriftDetected (an Event per drifted object, and the Drifted
	// condition's reason while drift is left) and ReasonDriftConflict
	// (fields left to a manager that keeps changing them back) say what
	// was changed outside Git; ReasonDriftHealed that plumb put it back.
	ReasonDriftDetected = "DriftDetected"
	ReasonDriftConflict = "DriftConflict"
	ReasonDriftHealed   = "DriftHealed"
	// ReasonHistoryRewritten is the Event of a branch whose new commit does
	// not descend from the last one applied (a force-push).
	ReasonHistoryRewritten = "HistoryRewritten"
	// ReasonKindNotServed is the Event naming objects of a kind the API
	// server no longer serves, which prune cannot reach.
	ReasonKindNotServed = "KindNotServed"
	// ReasonOrphaned is the Event of a deleted App whose objects are left
	// in place.
	ReasonOrphaned = "Orphaned"
	// ReasonDestinationChanged is the Event of an App whose destination
	// changed: the objects it applied to the former one are left there,
	// not pruned.
	ReasonDestinationChanged = "DestinationChanged"
	// ReasonVerified: a trusted key verified the source's signature.
	ReasonVerified = "Verified"
	// ReasonVerificationFailed: no signature of the revision verified.
	ReasonVerificationFailed = "VerificationFailed"
	// ReasonSyncStarted, ReasonSyncSucceeded and ReasonSyncFailed are the
	// Events of an ordered sync (status.sync).
	ReasonSyncStarted   = "SyncStarted"
	ReasonSyncSucceeded = "SyncSucceeded"
	ReasonSyncFailed    = "SyncFailed"
)
