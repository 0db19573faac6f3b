package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/source"
	"github.com/plumb-dev/plumb/internal/source/bucket"
	"github.com/plumb-dev/plumb/internal/source/git"
	"github.com/plumb-dev/plumb/internal/source/helmrepo"
	"github.com/plumb-dev/plumb/internal/source/oci"
	"github.com/plumb-dev/plumb/internal/source/render"
	"github.com/plumb-dev/plumb/queue"
)

// readPhase runs the Read phase, or reuses the App's last successful read
// when only an event (a change of one of its objects) brought the tick
// forward: such a tick asks Git nothing. The fallback timer, a webhook or
// `plumb sync` (both set the sync annotation), a changed spec and the
// App's first tick read Git; a webhook, a sync request and a changed spec
// ask the remote afresh, the others may share an ls-remote made moments
// ago (and a render, or a render's failure, that is cached).
func (r *Reconciler) readPhase(ctx context.Context, app *plumbv1.App, wake queue.Wake, cluster ClusterInfo) (*source.Result, error) {
	key := client.ObjectKeyFromObject(app)
	syncRequest := app.Annotations[plumbv1.AnnotationSyncRequestedAt]
	lastGeneration, known := r.memory.readGeneration(key)
	newRequest := syncRequest != "" && syncRequest != app.Status.LastHandledSyncRequest
	newSpec := known && lastGeneration != app.Generation
	refresh := newRequest || newSpec
	if wake == queue.WakeEvent && !refresh {
		if last := r.memory.readAt(key, app.Generation); last != nil {
			reused := *last
			reused.Cached, reused.HistoryRewritten = true, false
			return &reused, nil
		}
	}
	// A sync request is answered by a fresh read, whatever it finds.
	app.Status.LastHandledSyncRequest = syncRequest
	var freshSince time.Time // zero: a fresh read asks afresh now
	if seen, ok := r.memory.syncRequestSeen(key, syncRequest); ok && newRequest && !newSpec {
		// The request came after its push: what was asked of the source
		// since this replica saw it (for another App the same push woke)
		// is fresh enough.
		freshSince = seen
	}
	result, err := r.read(ctx, app, refresh, freshSince, cluster)
	r.recordVerification(app, result, err)
	r.memory.triedRead(key, app.Generation)
	if err != nil {
		r.memory.forgetRead(key)
		var readErr *source.Error
		if errors.As(err, &readErr) && readErr.Revision != "" {
			app.Status.LastAttemptedRevision = readErr.Revision // the commit that failed, as soon as it is known
		}
		return nil, err
	}
	r.memory.rememberRead(key, app.Generation, result)
	r.tellLeftOut(app, result)
	return result, nil
}

// recordVerification sets the SourceVerified condition of an App whose
// source asks for a signature: True naming the key that verified the
// revision read, False when no signature verified (the read failed, and
// nothing of that revision is applied). Other read failures leave it as
// it was; an App that asks for no signature has none.
func (r *Reconciler) recordVerification(app *plumbv1.App, result *source.Result, err error) {
	verify := app.Spec.Source.Verification()
	if verify == nil {
		apimeta.RemoveStatusCondition(&app.Status.Conditions, plumbv1.ConditionSourceVerified)
		return
	}
	var phaseErr *PhaseError
	switch {
	case err == nil && result.Verified != nil:
		setCondition(app, plumbv1.ConditionSourceVerified, true, plumbv1.ReasonVerified,
			fmt.Sprintf("%s signature of %s verified with key %s of secret %s", verify.Provider, result.Verified.Digest, result.Verified.Key, verify.SecretRef.Name), r.now())
	case errors.As(err, &phaseErr) && phaseErr.Detail == string(source.ReasonVerificationFailed):
		setCondition(app, plumbv1.ConditionSourceVerified, false, plumbv1.ReasonVerificationFailed, phaseErr.Err.Error(), r.now())
	}
}

// maxLeftOutListed bounds the objects a LeftOut Event names.
const maxLeftOutListed = 10

// tellLeftOut records an Event naming the rendered objects that are not
// applied, once per render (a read served from the cache tells nothing).
func (r *Reconciler) tellLeftOut(app *plumbv1.App, result *source.Result) {
	if result.Cached || len(result.LeftOut) == 0 {
		return
	}
	// Grouped by why, in the order the render gave them.
	var reasons []string
	byReason := map[string][]string{}
	listed := 0
	for _, l := range result.LeftOut {
		if _, ok := byReason[l.Reason]; !ok {
			reasons = append(reasons, l.Reason)
		}
		if listed < maxLeftOutListed {
			byReason[l.Reason] = append(byReason[l.Reason], fmt.Sprintf("%s (%s)", l.ID, l.Source))
			listed++
		} else if byReason[l.Reason] == nil {
			byReason[l.Reason] = []string{}
		}
	}
	var parts []string
	for _, reason := range reasons {
		parts = append(parts, reason+": "+strings.Join(byReason[reason], ", "))
	}
	more := ""
	if n := len(result.LeftOut) - listed; n > 0 {
		more = fmt.Sprintf(" (and %d more)", n)
	}
	r.Events.Eventf(app, corev1.EventTypeNormal, plumbv1.ReasonLeftOut, "revision %s: not applied, as %s%s",
		result.Revision.Short(), strings.Join(parts, "; "), more)
}

// read asks Git (package source). With refresh it asks the remote afresh
// and skips the render cache; otherwise it may share an ls-remote made
// moments ago by a read of the same repository with the same credentials.
func (r *Reconciler) read(ctx context.Context, app *plumbv1.App, refresh bool, freshSince time.Time, cluster ClusterInfo) (*source.Result, error) {
	fail := func(detail string, err error, terminal bool) error {
		return &PhaseError{Phase: PhaseRead, Reason: plumbv1.ReasonReadFailed, Detail: detail, Err: err, Terminal: terminal}
	}
	if err := r.refuseFileSource(app); err != nil {
		return nil, err
	}
	appKey := client.ObjectKeyFromObject(app)
	secretRef := app.Spec.Source.GitRepository().SecretRef
	switch {
	case app.Spec.Source.OCI != nil:
		secretRef = app.Spec.Source.OCI.SecretRef
	case app.Spec.Source.Helm != nil:
		secretRef = app.Spec.Source.Helm.SecretRef
	case app.Spec.Source.Bucket != nil:
		secretRef = app.Spec.Source.Bucket.SecretRef
	}
	var verifyRef *plumbv1.LocalObjectReference
	if v := app.Spec.Source.Verification(); v != nil {
		verifyRef = &v.SecretRef
	}
	var used []string
	if name := app.Spec.Destination.SecretName(); name != "" {
		used = append(used, name) // read by targetOf, kept watched
	}
	refs := []*plumbv1.LocalObjectReference{secretRef, verifyRef}
	if app.Spec.Helm != nil {
		for _, repo := range app.Spec.Helm.Repositories {
			refs = append(refs, repo.SecretRef)
		}
	}
	for _, ref := range refs {
		if ref != nil {
			used = append(used, ref.Name)
		}
	}
	r.Credentials.Release(appKey, used...)
	var secret map[string][]byte
	if secretRef != nil {
		s, err := r.Credentials.Get(ctx, appKey, secretRef.Name)
		if err != nil {
			return nil, fail(string(source.ReasonSourceUnavailable), fmt.Errorf("reading secret %s/%s: %w", app.Namespace, secretRef.Name, err), false)
		}
		secret = s.Data
	}
	var verifyKeys map[string][]byte
	if verifyRef != nil {
		keys, err := r.verificationKeys(ctx, appKey, verifyRef.Name, app.Spec.Source.Verification().Provider)
		if err != nil {
			return nil, fail(string(source.ReasonVerificationFailed), err, false)
		}
		verifyKeys = keys
	}
	helm, err := helmOptions(app)
	if err != nil {
		return nil, fail(string(source.ReasonInvalidSpec), err, true)
	}
	charts, err := r.chartRepositories(ctx, appKey, app)
	if err != nil {
		return nil, fail(string(source.ReasonSourceUnavailable), err, false)
	}
	req := source.Request{
		Path:              app.Spec.Source.Path,
		Render:            render.Options{Helm: helm},
		LastRevision:      app.Status.LastAppliedRevision,
		Refresh:           refresh,
		FreshSince:        freshSince,
		ChartRepositories: charts,
	}
	o := app.Spec.Source.OCI
	if h := app.Spec.Source.Helm; h != nil {
		req.Path = h.Chart                                        // the chart's folder in its archive
		files := make([]string, len(req.Render.Helm.ValuesFiles)) // not the App's own slice
		for i, f := range req.Render.Helm.ValuesFiles {
			files[i] = h.Chart + "/" + f
		}
		req.Render.Helm.ValuesFiles = files
		if o = ociChart(h); o == nil {
			req.Helm = &source.HelmRequest{Repository: h.Repository, Chart: h.Chart, Version: h.Version}
			if verifyKeys != nil {
				req.Helm.Verify = &source.HelmVerify{Keys: verifyKeys}
			}
			if secretRef != nil {
				if req.Helm.Auth, err = helmAuth(secretRef, secret); err != nil {
					return nil, fail(string(source.ReasonSourceUnavailable), err, false)
				}
			}
		}
	}
	if o != nil {
		if req.OCI, err = ociRequest(o, secretRef, secret); err != nil {
			return nil, fail(string(source.ReasonSourceUnavailable), err, false)
		}
		if verifyKeys != nil {
			req.OCI.Verify = &source.OCIVerify{Keys: verifyKeys}
		}
	} else if b := app.Spec.Source.Bucket; b != nil {
		req.Bucket = &source.BucketRequest{Location: bucket.Location{Endpoint: b.Endpoint, Bucket: b.Bucket, Prefix: b.Prefix,
			Region: b.Region, Insecure: b.Insecure}}
		if secretRef != nil {
			if req.Bucket.Auth, err = bucketAuth(secretRef, secret); err != nil {
				return nil, fail(string(source.ReasonSourceUnavailable), err, false)
			}
		}
	} else if req.Helm == nil {
		g := app.Spec.Source.GitRepository()
		ref := g.Ref
		req.URL, req.Auth = g.URL, source.AuthFromSecret(secret)
		req.Ref = git.Ref{Branch: ref.Branch, Tag: ref.Tag, SemVer: ref.SemVer, Commit: ref.Commit}
	}
	if cluster != nil {
		req.Cluster = cluster // asked only for a Helm chart
	}
	result, err := r.Reader.Read(ctx, req)
	if err != nil {
		var readErr *source.Error
		terminal := errors.As(err, &readErr) && readErr.Terminal()
		return nil, fail(string(source.ReasonOf(err)), err, terminal)
	}
	return result, nil
}

// helmOptions are the App's Helm options.
func helmOptions(app *plumbv1.App) (render.HelmOptions, error) {
	values, err := app.Spec.Helm.ValuesMap()
	if err != nil {
		return render.HelmOptions{}, err
	}
	helm := render.HelmOptions{ReleaseName: app.Name, Namespace: app.Namespace, Values: values}
	if app.Spec.TargetNamespace != "" {
		helm.Namespace = app.Spec.TargetNamespace
	}
	if h := app.Spec.Helm; h != nil {
		if h.ReleaseName != "" {
			helm.ReleaseName = h.ReleaseName
		}
		helm.ValuesFiles = h.ValuesFiles
	}
	return helm, nil
}

// chartRepositories are the accounts of spec.helm.repositories, each
// from its Secret in the App's namespace.
func (r *Reconciler) chartRepositories(ctx context.Context, app client.ObjectKey, spec *plumbv1.App) ([]source.ChartRepository, error) {
	if spec.Spec.Helm == nil {
		return nil, nil
	}
	var out []source.ChartRepository
	for _, repo := range spec.Spec.Helm.Repositories {
		account := source.ChartRepository{URL: repo.URL, Insecure: repo.Insecure}
		if repo.SecretRef != nil {
			s, err := r.Credentials.Get(ctx, app, repo.SecretRef.Name)
			if err != nil {
				return nil, fmt.Errorf("reading secret %s/%s of helm.repositories: %w", app.Namespace, repo.SecretRef.Name, err)
			}
			if strings.HasPrefix(repo.URL, oci.Scheme) {
				o, err := ociRequest(&plumbv1.OCISource{URL: repo.URL}, repo.SecretRef, s.Data)
				if err != nil {
					return nil, fmt.Errorf("helm.repositories: %w", err)
				}
				account.OCI = o.Auth
			} else if account.Helm, err = helmAuth(repo.SecretRef, s.Data); err != nil {
				return nil, fmt.Errorf("helm.repositories: %w", err)
			}
		}
		out = append(out, account)
	}
	return out, nil
}

// ociChart is a Helm source's chart in an OCI registry as the OCI source
// that reads it (its Helm chart layer, at the tag of the exact version or
// the highest tag in the range), or nil for an HTTP repository.
func ociChart(h *plumbv1.HelmSource) *plumbv1.OCISource {
	if !strings.HasPrefix(h.Repository, oci.Scheme) {
		return nil
	}
	o := &plumbv1.OCISource{URL: strings.TrimSuffix(h.Repository, "/") + "/" + h.Chart, SecretRef: h.SecretRef, Insecure: h.Insecure,
		Verify: h.Verify, LayerSelector: &plumbv1.OCILayerSelector{MediaType: oci.MediaTypeHelmChart}}
	ref := oci.ChartRef(h.Version)
	o.Ref.Tag, o.Ref.SemVer = ref.Tag, ref.SemVer // read with ChartTags: the layer is a chart's
	return o
}

// helmAuth is the basic-auth account of an HTTP Helm repository, from the
// username and password keys of the App's Secret.
func helmAuth(ref *plumbv1.LocalObjectReference, secret map[string][]byte) (helmrepo.Auth, error) {
	username, password := secret["username"], secret["password"]
	if len(username) == 0 && len(password) == 0 {
		return helmrepo.Auth{}, fmt.Errorf("secret %s holds no username or password key (the account of the Helm repository)", ref.Name)
	}
	return helmrepo.Auth{Username: string(username), Password: string(password)}, nil
}

// bucketAuth is the access key pair of a bucket, from the accesskey and
// secretkey keys of the App's Secret (as Flux's Bucket takes them).
func bucketAuth(ref *plumbv1.LocalObjectReference, secret map[string][]byte) (bucket.Auth, error) {
	access, key := secret["accesskey"], secret["secretkey"]
	if len(access) == 0 || len(key) == 0 {
		return bucket.Auth{}, fmt.Errorf("secret %s must hold the accesskey and secretkey keys (the bucket's access key pair)", ref.Name)
	}
	return bucket.Auth{AccessKey: string(access), SecretKey: string(key)}, nil
}

// ociRequest is what the Read phase asks of an OCI source, with the
// account for its registry from the App's dockerconfigjson Secret.
func ociRequest(o *plumbv1.OCISource, secretRef *plumbv1.LocalObjectReference, secret map[string][]byte) (*source.OCIRequest, error) {
	req := &source.OCIRequest{URL: o.URL, Ref: oci.Ref{Tag: o.Ref.Tag, SemVer: o.Ref.SemVer, Digest: o.Ref.Digest}, Insecure: o.Insecure}
	if o.LayerSelector != nil {
		req.LayerMediaType = o.LayerSelector.MediaType
	}
	if secretRef == nil {
		return req, nil
	}
	config, ok := secret[oci.SecretKeyDockerConfig]
	if !ok {
		return nil, fmt.Errorf("secret %s holds no %s key: create it with kubectl create secret docker-registry", secretRef.Name, oci.SecretKeyDockerConfig)
	}
	auth, err := oci.AuthFromDockerConfig(config, o.URL)
	if err != nil {
		return nil, fmt.Errorf("secret %s: %w", secretRef.Name, err)
	}
	req.Auth = auth
	return req, nil
}

// verificationKeys reads the public keys of an App's verification Secret:
// for cosign its keys ending in .pub (as Flux names them), for helm its
// OpenPGP keyrings, ending in .gpg or .asc.
func (r *Reconciler) verificationKeys(ctx context.Context, app client.ObjectKey, name, provider string) (map[string][]byte, error) {
	s, err := r.Credentials.Get(ctx, app, name)
	if err != nil {
		return nil, fmt.Errorf("reading the verification secret %s/%s: %w", app.Namespace, name, err)
	}
	suffixes, want := []string{".pub"}, "ending in .pub (a PEM public key, such as cosign.pub)"
	if provider == plumbv1.VerifyProviderHelm {
		suffixes, want = []string{".gpg", ".asc"}, "ending in .gpg or .asc (an OpenPGP public keyring, as gpg --export writes it)"
	}
	keys := map[string][]byte{}
	for key, value := range s.Data {
		for _, suffix := range suffixes {
			if strings.HasSuffix(key, suffix) {
				keys[key] = value
			}
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("the verification secret %s/%s holds no key %s", app.Namespace, name, want)
	}
	return keys, nil
}
