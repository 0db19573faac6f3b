package source

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing/format/gitignore"

	"github.com/plumb-dev/plumb/internal/revision"
	"github.com/plumb-dev/plumb/internal/source/render"
	"github.com/plumb-dev/plumb/internal/source/tree"
)

// LocalRevision is the Name of the revision a Local read reports: a
// working copy has no commit.
const LocalRevision = "working-copy"

// Local reads a working copy on this machine's disk in place of the App's
// Git source, to preview a change before it is pushed (`plumb diff
// --path`). It renders as Reader renders a commit: the same limits, the
// same renderers (in the same child process when Isolation is set), and
// the request's render options; the request's URL, ref and credentials
// are not used.
//
// Dir is the App's folder in the working copy. The tree it renders is the
// whole repository the folder belongs to (the nearest parent folder with
// a .git), so that a Kustomize overlay's ../base resolves as it does in
// Git; without one, Dir alone. Files under .git are never read; symlinks
// stay inside the tree, as in Git.
type Local struct {
	Dir       string
	Limits    Limits
	Isolation *render.Isolation
	// Dependencies, when set, fetches the dependencies of a chart that
	// the working copy does not vendor from their repositories, with the
	// request's accounts, as the controller's read would; without it
	// they stay the render's to refuse.
	Dependencies *Reader
}

// Read renders the working copy.
func (l *Local) Read(ctx context.Context, req Request) (*Result, error) {
	dir, err := filepath.Abs(l.Dir)
	if err != nil {
		return nil, &Error{Reason: ReasonInvalidSpec, Err: err}
	}
	if info, err := os.Stat(dir); err != nil || !info.IsDir() {
		if err == nil {
			err = errors.New("not a folder")
		}
		return nil, &Error{Reason: ReasonInvalidSpec, Err: fmt.Errorf("the working copy %s: %w", l.Dir, err)}
	}
	root := repositoryRoot(dir)
	rel, err := filepath.Rel(root, dir)
	if err != nil {
		return nil, &Error{Reason: ReasonInvalidSpec, Err: err}
	}
	t, err := localTree(root, tree.Limits{MaxFiles: l.Limits.MaxFiles, MaxTotalBytes: l.Limits.MaxTotalBytes, MaxFileBytes: l.Limits.MaxFileBytes})
	if err != nil {
		return nil, classify("", err)
	}
	if engine, err := render.Detect(t, filepath.ToSlash(rel)); err == nil && engine == render.Helm {
		if l.Dependencies != nil {
			if t, _, err = l.Dependencies.withDependencies(ctx, &req, t, filepath.ToSlash(rel), LocalRevision, "local\x00"+dir); err != nil {
				return nil, err
			}
		}
		if _, err := withCapabilities(ctx, &req, ""); err != nil {
			return nil, &Error{Reason: ReasonRenderFailed, Err: err, retry: true}
		}
	}
	opts := req.Render
	opts.Isolation = l.Isolation
	out, err := renderTree(ctx, t, filepath.ToSlash(rel), opts, l.Limits, DefaultRenderTimeout, "")
	if err != nil {
		return nil, err
	}
	return &Result{Revision: revision.Revision{Name: LocalRevision}, Engine: out.engine, Objects: out.objects, LeftOut: out.leftOut}, nil
}

// repositoryRoot is the nearest folder at or above dir that holds a .git,
// or dir itself when none does. A home folder is never taken for one (a
// repository of dotfiles would make the tree the whole home).
func repositoryRoot(dir string) string {
	home, _ := os.UserHomeDir()
	for at := dir; ; {
		if _, err := os.Lstat(filepath.Join(at, ".git")); err == nil && (at != home || at == dir) {
			return at
		}
		parent := filepath.Dir(at)
		if parent == at {
			return dir
		}
		at = parent
	}
}

// localTree is the files under root that Git would track (none under
// .git, none its .gitignore files ignore), read lazily.
func localTree(root string, limits tree.Limits) (*tree.Tree, error) {
	b := tree.NewBuilder(limits, func(key string) ([]byte, error) { return os.ReadFile(key) })
	// What Git ignores is not in a commit either.
	patterns, err := gitignore.ReadPatterns(osfs.New(root), nil)
	if err != nil {
		return nil, fmt.Errorf("reading the working copy's .gitignore files: %w", err)
	}
	ignored := gitignore.NewMatcher(patterns)
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		switch {
		case d.IsDir() && d.Name() == ".git":
			return filepath.SkipDir
		case ignored.Match(strings.Split(name, "/"), d.IsDir()):
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		case d.IsDir():
			return nil
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return b.AddSymlink(name, filepath.ToSlash(target))
		case d.Type().IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			return b.AddFile(name, info.Size(), p)
		}
		return nil // sockets, devices and pipes are no content
	})
	if err != nil {
		return nil, err
	}
	return b.Build(), nil
}
