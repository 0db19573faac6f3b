package v1alpha1

// The labels, annotations and field manager plumb writes on, or reads
// from, the objects it applies: the ownership contract of design.md,
// defined once here.
const (
	// FieldManager is the identity the API server records in managedFields
	// for every write plumb makes to the objects it applies.
	FieldManager = "plumb"
	// LabelAppName and LabelAppNamespace name the App that owns an object;
	// informers watch only objects with LabelAppName, and prune and apply
	// check both before they touch an object.
	LabelAppName      = "plumb.dev/app-name"
	LabelAppNamespace = "plumb.dev/app-namespace"
	// LabelSlot is the slot of the owning App (0–255, a hash of its
	// namespace/name that never changes): a replica of a sharded
	// controller (--shards=auto) watches only the objects of the slots it
	// holds.
	LabelSlot = "plumb.dev/slot"
	// AnnotationRevision is the source revision that last changed the
	// object's content (not rewritten when a commit leaves it unchanged).
	AnnotationRevision = "plumb.dev/revision"
	// AnnotationContentHash is a digest of the content plumb last applied
	// (without these annotations): after a restart it tells a change in Git
	// from a change made by hand.
	AnnotationContentHash = "plumb.dev/content-hash"
	// AnnotationPrune set to "disabled" keeps an object when it leaves Git;
	// set to "enabled" it lets a Namespace or CRD be pruned.
	AnnotationPrune = "plumb.dev/prune"
	// AnnotationHelmResourcePolicy is Helm's annotation that, set to keep,
	// keeps an object that leaves the chart: plumb's prune guard honours it
	// as it does AnnotationPrune: disabled.
	AnnotationHelmResourcePolicy = "helm.sh/resource-policy"
	// AnnotationForce set to "enabled" lets plumb delete and recreate the
	// object when Git changes one of its immutable fields.
	AnnotationForce = "plumb.dev/force"
	// AnnotationTakeover on a live object, set to "<namespace>/<name>" of an
	// App, lets that App take the object over from the App that owns it;
	// without it an App that renders an object another App owns fails with
	// a Conflict and leaves the object alone. Naming the App (rather than
	// allowing anyone) keeps the two Apps from taking it back and forth.
	AnnotationTakeover = "plumb.dev/takeover"
)
