// Package tree is a read-only, in-memory view of a repository's files at one
// revision. It knows paths, sizes and symlinks up front and reads contents on
// demand, enforces size limits while it is built, and resolves every path
// (symlinks included) strictly inside the repository root.
package tree

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
)

// ErrEscapesRoot means a path or a symlink points outside the repository.
var ErrEscapesRoot = errors.New("leaves the repository root")

// ErrNotExist means no file or folder has that path.
var ErrNotExist = fs.ErrNotExist

// PathError says which path failed to resolve and why.
type PathError struct {
	Path string
	Err  error
}

func (e *PathError) Error() string { return fmt.Sprintf("%s: %v", e.Path, e.Err) }
func (e *PathError) Unwrap() error { return e.Err }

// Limits bound what a tree may hold. Zero means no limit.
type Limits struct {
	// MaxFiles is the largest number of files (symlinks included).
	MaxFiles int
	// MaxTotalBytes is the largest sum of file sizes.
	MaxTotalBytes int64
	// MaxFileBytes is the largest single file.
	MaxFileBytes int64
}

// LimitError says which limit a tree exceeded.
type LimitError struct {
	// Limit names the limit, e.g. "file count".
	Limit string
	// Max is the limit and Got what was seen (at the point it was exceeded).
	Max, Got int64
	// Path is the file that crossed the limit.
	Path string
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%s limit exceeded at %s: %d > %d", e.Limit, e.Path, e.Got, e.Max)
}

// Loader reads the content of a file from where the tree was built from.
type Loader func(key string) ([]byte, error)

type entry struct {
	size    int64
	symlink bool
	target  string // the symlink's target, as stored
	key     string // what the loader reads
}

// Tree is a repository's files at one revision. It is safe for concurrent
// reads once built.
type Tree struct {
	files  map[string]entry
	dirs   map[string][]string // folder → sorted child names ("" is the root)
	load   Loader
	total  int64
	limits Limits
	read   atomic.Int64 // bytes ReadFile returned so far
}

// Builder adds files to a new Tree, enforcing limits as it goes.
type Builder struct {
	limits Limits
	tree   *Tree
}

// NewBuilder starts a tree whose contents load reads. A tree built with no
// loader is read through its views (View).
func NewBuilder(limits Limits, load Loader) *Builder {
	return &Builder{limits: limits, tree: &Tree{
		files:  map[string]entry{},
		dirs:   map[string][]string{"": nil},
		load:   load,
		limits: limits,
	}}
}

// AddFile adds a regular file of the given size; key is what the loader reads.
func (b *Builder) AddFile(name string, size int64, key string) error {
	return b.add(name, entry{size: size, key: key})
}

// AddSymlink adds a symlink whose target is stored as written.
func (b *Builder) AddSymlink(name, target string) error {
	return b.add(name, entry{symlink: true, target: target, size: int64(len(target))})
}

func (b *Builder) add(name string, e entry) error {
	clean, err := cleanRelative(name)
	if err != nil || clean == "" {
		return &PathError{Path: name, Err: fmt.Errorf("not a file path inside the repository: %w", ErrEscapesRoot)}
	}
	if e.size < 0 {
		return &PathError{Path: clean, Err: fmt.Errorf("a size of %d bytes", e.size)}
	}
	t := b.tree
	if _, dup := t.files[clean]; dup {
		return &PathError{Path: clean, Err: errors.New("added twice")}
	}
	if _, isDir := t.dirs[clean]; isDir {
		return &PathError{Path: clean, Err: errors.New("is both a file and a folder")}
	}
	if max := int64(b.limits.MaxFiles); max > 0 && int64(len(t.files))+1 > max {
		return &LimitError{Limit: "file count", Max: max, Got: int64(len(t.files)) + 1, Path: clean}
	}
	if max := b.limits.MaxFileBytes; max > 0 && e.size > max {
		return &LimitError{Limit: "file size", Max: max, Got: e.size, Path: clean}
	}
	if max := b.limits.MaxTotalBytes; max > 0 && t.total+e.size > max {
		return &LimitError{Limit: "repository size", Max: max, Got: t.total + e.size, Path: clean}
	}
	// Register the parent folders.
	child := clean
	for {
		parent := path.Dir(child)
		if parent == "." {
			parent = ""
		}
		if _, isFile := t.files[parent]; isFile {
			return &PathError{Path: clean, Err: fmt.Errorf("parent %s is a file", parent)}
		}
		_, known := t.dirs[parent]
		t.dirs[parent] = append(t.dirs[parent], path.Base(child))
		if known || parent == "" {
			break
		}
		child = parent
	}
	t.files[clean] = e
	t.total += e.size
	return nil
}

// Build finishes the tree.
func (b *Builder) Build() *Tree {
	for dir, children := range b.tree.dirs {
		sort.Strings(children)
		b.tree.dirs[dir] = compactSorted(children)
	}
	return b.tree
}

func compactSorted(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// View returns a view of the same files that reads contents with load and
// counts its reads against MaxTotalBytes from zero: a tree shared by
// several renders gives each its own, so that the limit bounds every render
// alone.
func (t *Tree) View(load Loader) *Tree {
	return &Tree{files: t.files, dirs: t.dirs, load: load, total: t.total, limits: t.limits}
}

// FileCount is the number of files and symlinks.
func (t *Tree) FileCount() int { return len(t.files) }

// TotalBytes is the sum of the files' sizes.
func (t *Tree) TotalBytes() int64 { return t.total }

// cleanRelative cleans a slash-separated path relative to the root. It
// rejects absolute paths and paths that climb above the root.
func cleanRelative(p string) (string, error) {
	if strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) {
		return "", ErrEscapesRoot
	}
	clean := path.Clean("/" + p)[1:] // the leading "/" pins ".." at the root ...
	if raw := path.Clean(p); raw == ".." || strings.HasPrefix(raw, "../") {
		return "", ErrEscapesRoot // ... so detect climbing on the raw path
	}
	return clean, nil
}

// maxSymlinkHops bounds symlink chains (and cycles), as Linux does.
const maxSymlinkHops = 40

// Resolve cleans p (relative to the root), follows every symlink on the way,
// and returns the real path of the file or folder it names. It fails with
// ErrEscapesRoot when p or any symlink leaves the root, and ErrNotExist when
// nothing is there.
func (t *Tree) Resolve(p string) (string, error) {
	resolved, err := t.resolve(p, 0)
	if err != nil {
		return "", &PathError{Path: p, Err: err}
	}
	return resolved, nil
}

func (t *Tree) resolve(p string, hops int) (string, error) {
	clean, err := cleanRelative(p)
	if err != nil {
		return "", err
	}
	if clean == "" {
		return "", nil
	}
	parts := strings.Split(clean, "/")
	current := ""
	for i, part := range parts {
		next := part
		if current != "" {
			next = current + "/" + part
		}
		if e, ok := t.files[next]; ok && e.symlink {
			if hops >= maxSymlinkHops {
				return "", errors.New("too many levels of symbolic links")
			}
			target, err := cleanRelative(joinRel(current, e.target))
			if err != nil || strings.HasPrefix(e.target, "/") {
				return "", fmt.Errorf("symlink %s → %s: %w", next, e.target, ErrEscapesRoot)
			}
			if rest := strings.Join(parts[i+1:], "/"); rest != "" {
				target = joinRel(target, rest)
			}
			resolved, err := t.resolve(target, hops+1)
			if err != nil {
				return "", err
			}
			return resolved, nil
		}
		if _, isFile := t.files[next]; isFile && i < len(parts)-1 {
			return "", fmt.Errorf("%s is a file, not a folder: %w", next, ErrNotExist)
		}
		current = next
	}
	if _, ok := t.files[current]; ok {
		return current, nil
	}
	if _, ok := t.dirs[current]; ok {
		return current, nil
	}
	return "", ErrNotExist
}

// IsDir reports whether p resolves to a folder.
func (t *Tree) IsDir(p string) bool {
	resolved, err := t.Resolve(p)
	if err != nil {
		return false
	}
	_, ok := t.dirs[resolved]
	return ok
}

// Exists reports whether p resolves to a file or folder inside the root.
func (t *Tree) Exists(p string) bool {
	_, err := t.Resolve(p)
	return err == nil
}

// ReadFile returns the content of the file p resolves to. Every byte it
// returns counts against MaxTotalBytes, so reading one file again and again
// through symlinks is bounded too.
func (t *Tree) ReadFile(p string) ([]byte, error) {
	resolved, err := t.Resolve(p)
	if err != nil {
		return nil, err
	}
	e, ok := t.files[resolved]
	if !ok {
		return nil, &PathError{Path: p, Err: errors.New("is a folder")}
	}
	if max := t.limits.MaxTotalBytes; max > 0 {
		if read := t.read.Add(e.size); read > max {
			return nil, &LimitError{Limit: "bytes read", Max: max, Got: read, Path: p}
		}
	}
	if t.load == nil {
		return nil, &PathError{Path: p, Err: errors.New("the tree has no loader (read it through a View)")}
	}
	data, err := t.load(e.key)
	if err != nil {
		return nil, &PathError{Path: p, Err: err}
	}
	return data, nil
}

// ReadDir lists the names in the folder p resolves to, sorted.
func (t *Tree) ReadDir(p string) ([]string, error) {
	resolved, err := t.Resolve(p)
	if err != nil {
		return nil, err
	}
	children, ok := t.dirs[resolved]
	if !ok {
		return nil, &PathError{Path: p, Err: errors.New("is a file, not a folder")}
	}
	return append([]string(nil), children...), nil
}

// Files returns the paths of every file under the folder root (as seen
// through symlinks, each path relative to the repository root and under
// root's own spelling), in lexical order. Symlinked folders are followed
// once; a symlink that leaves the root is an error. Symlinks can make a few
// entries name exponentially many paths, so every file listed and every
// folder visited counts against MaxFiles.
func (t *Tree) Files(root string) ([]string, error) {
	resolved, err := t.Resolve(root)
	if err != nil {
		return nil, err
	}
	if _, ok := t.dirs[resolved]; !ok {
		return nil, &PathError{Path: root, Err: errors.New("is a file, not a folder")}
	}
	clean, _ := cleanRelative(root)
	var out []string
	visiting := map[string]bool{}
	folders := 0
	max := t.limits.MaxFiles
	var walk func(display, real string) error
	walk = func(display, real string) error {
		if visiting[real] {
			return &PathError{Path: display, Err: errors.New("symlink cycle")}
		}
		if folders++; max > 0 && folders > max {
			return &LimitError{Limit: "listed folders", Max: int64(max), Got: int64(folders), Path: display}
		}
		visiting[real] = true
		defer delete(visiting, real)
		for _, name := range t.dirs[real] {
			displayChild := joinRel(display, name)
			realChild := joinRel(real, name)
			target, err := t.Resolve(realChild)
			if err != nil {
				return &PathError{Path: displayChild, Err: errors.Unwrap(err)}
			}
			if _, isDir := t.dirs[target]; isDir {
				if err := walk(displayChild, target); err != nil {
					return err
				}
				continue
			}
			if max > 0 && len(out) >= max {
				return &LimitError{Limit: "listed files", Max: int64(max), Got: int64(len(out)) + 1, Path: displayChild}
			}
			out = append(out, displayChild)
		}
		return nil
	}
	if err := walk(clean, resolved); err != nil {
		return nil, err
	}
	sort.Strings(out)
	return out, nil
}

func joinRel(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// Limits are the limits the tree was built within.
func (t *Tree) Limits() Limits { return t.limits }

// Sub is the folder dir of t as a tree of its own (its paths relative to
// dir), within limits. A symlink inside dir that points out of it is an
// error when it is followed, as it leaves the new root.
func (t *Tree) Sub(dir string, limits Limits) (*Tree, error) {
	resolved, err := t.Resolve(dir)
	if err != nil {
		return nil, err
	}
	if _, ok := t.dirs[resolved]; !ok {
		return nil, &PathError{Path: dir, Err: errors.New("is a file, not a folder")}
	}
	b := NewBuilder(limits, t.load)
	prefix := resolved + "/"
	for name, e := range t.files {
		rel, ok := name, resolved == ""
		if !ok {
			rel, ok = strings.CutPrefix(name, prefix)
		}
		if !ok {
			continue
		}
		if err := b.add(rel, e); err != nil {
			return nil, err
		}
	}
	return b.Build(), nil
}

// Graft is t with the files of each of subs added under its folder (a
// path of t), counted against t's limits: what t holds and what is added
// must fit them together. A path that t already holds is an error, and so
// is a symlink of a sub that does not resolve inside that sub: grafted,
// it would name what t holds.
func (t *Tree) Graft(subs map[string]*Tree) (*Tree, error) {
	for dir, sub := range subs {
		for name, e := range sub.files {
			if !e.symlink {
				continue
			}
			if _, err := sub.resolve(name, 0); err != nil {
				return nil, &PathError{Path: joinRel(dir, name), Err: fmt.Errorf("a symlink to %s, which is not inside the tree grafted at %s: %w", e.target, dir, ErrEscapesRoot)}
			}
		}
	}
	loaders := []Loader{t.load}
	b := NewBuilder(t.limits, func(key string) ([]byte, error) {
		i, inner, ok := strings.Cut(key, "\x00")
		n, err := strconv.Atoi(i)
		if !ok || err != nil || n < 0 || n >= len(loaders) || loaders[n] == nil {
			return nil, fmt.Errorf("%q: not a grafted tree's file", key)
		}
		return loaders[n](inner)
	})
	add := func(n int, dir string, from *Tree) error {
		for name, e := range from.files {
			e.key = strconv.Itoa(n) + "\x00" + e.key
			if err := b.add(joinRel(dir, name), e); err != nil {
				return err
			}
		}
		return nil
	}
	if err := add(0, "", t); err != nil {
		return nil, err
	}
	dirs := make([]string, 0, len(subs))
	for dir := range subs {
		dirs = append(dirs, dir)
	}
	sort.Strings(dirs)
	for _, dir := range dirs {
		clean, err := cleanRelative(dir)
		if err != nil {
			return nil, &PathError{Path: dir, Err: err}
		}
		loaders = append(loaders, subs[dir].load)
		if err := add(len(loaders)-1, clean, subs[dir]); err != nil {
			return nil, err
		}
	}
	return b.Build(), nil
}
