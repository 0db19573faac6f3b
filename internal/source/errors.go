package source

import (
	"errors"

	"github.com/plumb-dev/plumb/internal/source/git"
	"github.com/plumb-dev/plumb/internal/source/manifest"
	"github.com/plumb-dev/plumb/internal/source/render"
	"github.com/plumb-dev/plumb/internal/source/tree"
)

// Reason is a CamelCase word that says which part of the Read phase failed,
// for conditions, metrics and logs.
type Reason string

const (
	// ReasonSourceUnavailable: the Git server could not be reached or read
	// (network, TLS, authentication, host key).
	ReasonSourceUnavailable Reason = "SourceUnavailable"
	// ReasonRevisionNotFound: the branch, tag, semver range or commit names
	// nothing (it may have been deleted).
	ReasonRevisionNotFound Reason = "RevisionNotFound"
	// ReasonRenderFailed: the path is missing, or Kustomize or Helm failed.
	ReasonRenderFailed Reason = "RenderFailed"
	// ReasonInvalidManifest: a file is not valid YAML, an object lacks
	// apiVersion, kind or name, an object is defined twice, or a path or
	// symlink leaves the repository.
	ReasonInvalidManifest Reason = "InvalidManifest"
	// ReasonLimitExceeded: the repository or the render is larger than the
	// controller's limits allow.
	ReasonLimitExceeded Reason = "LimitExceeded"
	// ReasonInvalidSpec: the App's source spec itself is malformed (e.g. a
	// semver range that does not parse). Retrying cannot help.
	ReasonInvalidSpec Reason = "InvalidSpec"
	// ReasonVerificationFailed: the source asks for a signature, and no
	// trusted key verified one of the revision (or the keys themselves
	// could not be read).
	ReasonVerificationFailed Reason = "VerificationFailed"
)

// Error is a failed read. Its message names the repository, the file and
// the line where there is one, and never contains a credential or a value
// of a Secret.
type Error struct {
	Reason Reason
	// Revision is what was being read, when the ref had been resolved.
	Revision string
	Err      error
	// retry marks an error that a later read of the same revision may not
	// give (it is not remembered with the revision).
	retry bool
}

func (e *Error) Error() string {
	if e.Revision == "" {
		return e.Err.Error()
	}
	return "at " + e.Revision + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Terminal reports errors that retrying the same spec cannot fix until the
// spec changes.
func (e *Error) Terminal() bool { return e.Reason == ReasonInvalidSpec }

// ReasonOf returns the reason of a read error (SourceUnavailable for an
// error that is not an *Error).
func ReasonOf(err error) Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ReasonSourceUnavailable
}

// classify wraps an error of the git, tree, render or manifest packages with
// the reason an operator can act on.
func classify(revision string, err error) error {
	var (
		limitErr    *tree.LimitError
		manifestErr *manifest.Error
		dupErr      *manifest.DuplicateError
		renderErr   *render.Error
	)
	reason := ReasonSourceUnavailable
	switch {
	case errors.Is(err, git.ErrInvalidRef):
		reason = ReasonInvalidSpec
	case errors.Is(err, git.ErrRevisionNotFound):
		reason = ReasonRevisionNotFound
	case errors.As(err, &limitErr), errors.Is(err, git.ErrTooLarge):
		reason = ReasonLimitExceeded
	case errors.Is(err, tree.ErrEscapesRoot), errors.As(err, &manifestErr), errors.As(err, &dupErr):
		reason = ReasonInvalidManifest
	case errors.Is(err, render.ErrPathNotFound), errors.As(err, &renderErr):
		reason = ReasonRenderFailed
	case errors.Is(err, tree.ErrNotExist):
		reason = ReasonRenderFailed // a file that a render needs (e.g. a values file) is missing
	}
	return &Error{Reason: reason, Revision: revision, Err: err}
}
