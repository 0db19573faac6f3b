package tree

import (
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// build makes a tree from a map of path → content; a content starting with
// "-> " makes a symlink to the rest.
func build(t testing.TB, limits Limits, files map[string]string) (*Tree, error) {
	t.Helper()
	b := NewBuilder(limits, func(key string) ([]byte, error) {
		content, ok := files[key]
		if !ok {
			return nil, fmt.Errorf("no content for %s", key)
		}
		return []byte(content), nil
	})
	for _, name := range slices.Sorted(maps.Keys(files)) {
		content := files[name]
		var err error
		if target, ok := strings.CutPrefix(content, "-> "); ok {
			err = b.AddSymlink(name, target)
		} else {
			err = b.AddFile(name, int64(len(content)), name)
		}
		if err != nil {
			return nil, err
		}
	}
	return b.Build(), nil
}

var repo = map[string]string{
	"README.md":              "hello",
	"deploy/app.yaml":        "kind: A",
	"deploy/nested/svc.yaml": "kind: B",
	"deploy/alias.yaml":      "-> app.yaml",
	"deploy/up.yaml":         "-> ../README.md",
	"linked":                 "-> deploy",
	"chain":                  "-> linked/alias.yaml",
	"escape-relative":        "-> ../outside",
	"deploy/escape-deep":     "-> ../../etc/passwd",
	"escape-absolute":        "-> /etc/passwd",
	"loop-a":                 "-> loop-b",
	"loop-b":                 "-> loop-a",
}

func TestResolve(t *testing.T) {
	tr, err := build(t, Limits{}, repo)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path    string
		want    string
		wantErr error
	}{
		{path: "deploy/app.yaml", want: "deploy/app.yaml"},
		{path: "./deploy//app.yaml", want: "deploy/app.yaml"},
		{path: "deploy/nested/../app.yaml", want: "deploy/app.yaml"},
		{path: "", want: ""},
		{path: ".", want: ""},
		{path: "deploy", want: "deploy"},
		{path: "deploy/alias.yaml", want: "deploy/app.yaml"},
		{path: "deploy/up.yaml", want: "README.md"},
		{path: "linked/nested/svc.yaml", want: "deploy/nested/svc.yaml"},
		{path: "chain", want: "deploy/app.yaml"},
		{path: "../outside", wantErr: ErrEscapesRoot},
		{path: "deploy/../../outside", wantErr: ErrEscapesRoot},
		{path: "/etc/passwd", wantErr: ErrEscapesRoot},
		{path: "escape-relative", wantErr: ErrEscapesRoot},
		{path: "deploy/escape-deep", wantErr: ErrEscapesRoot},
		{path: "linked/escape-deep", wantErr: ErrEscapesRoot},
		{path: "escape-absolute", wantErr: ErrEscapesRoot},
		{path: "missing.yaml", wantErr: ErrNotExist},
		{path: "README.md/x", wantErr: ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			got, err := tr.Resolve(tt.path)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Resolve(%q) = %q, %v; want error %v", tt.path, got, err, tt.wantErr)
				}
				var pathErr *PathError
				if !errors.As(err, &pathErr) || pathErr.Path != tt.path {
					t.Errorf("error %v does not name the path %q", err, tt.path)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("Resolve(%q) = %q, %v; want %q", tt.path, got, err, tt.want)
			}
		})
	}
	t.Run("a symlink cycle ends with an error", func(t *testing.T) {
		if _, err := tr.Resolve("loop-a"); err == nil || !strings.Contains(err.Error(), "too many levels of symbolic links") {
			t.Errorf("Resolve(loop-a) error = %v", err)
		}
	})
	t.Run("escaping symlinks are named", func(t *testing.T) {
		_, err := tr.Resolve("deploy/escape-deep")
		if err == nil || !strings.Contains(err.Error(), "symlink deploy/escape-deep → ../../etc/passwd") {
			t.Errorf("error %v does not name the symlink and its target", err)
		}
	})
}

func TestReadFileFollowsSymlinks(t *testing.T) {
	tr, err := build(t, Limits{}, repo)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tr.ReadFile("linked/alias.yaml")
	if err != nil || string(got) != "kind: A" {
		t.Errorf("ReadFile(linked/alias.yaml) = %q, %v", got, err)
	}
	if _, err := tr.ReadFile("deploy"); err == nil {
		t.Error("ReadFile of a folder succeeded")
	}
}

func TestFilesListsInLexicalOrderThroughSymlinkedFolders(t *testing.T) {
	tr, err := build(t, Limits{}, map[string]string{
		"apps/b.yaml":      "b",
		"apps/a.yaml":      "a",
		"apps/sub/c.yaml":  "c",
		"apps/shared":      "-> ../shared",
		"shared/d.yaml":    "d",
		"other/skip.yaml":  "x",
		"apps/file-link.y": "-> ../other/skip.yaml",
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := tr.Files("apps")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"apps/a.yaml", "apps/b.yaml", "apps/file-link.y", "apps/shared/d.yaml", "apps/sub/c.yaml"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Files(apps) (-want +got):\n%s", diff)
	}

	escaping, err := build(t, Limits{}, map[string]string{"apps/a.yaml": "a", "apps/out": "-> ../../x"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := escaping.Files("apps"); !errors.Is(err, ErrEscapesRoot) || !strings.Contains(err.Error(), "apps/out") {
		t.Errorf("Files over an escaping symlink: %v, want ErrEscapesRoot naming apps/out", err)
	}
}

func TestBuilderEnforcesLimits(t *testing.T) {
	files := map[string]string{"a.yaml": "12345", "b.yaml": "1234567890", "c.yaml": "1"}
	tests := []struct {
		limits Limits
		want   LimitError
	}{
		{Limits{MaxFiles: 2}, LimitError{Limit: "file count", Max: 2, Got: 3, Path: "c.yaml"}},
		{Limits{MaxFileBytes: 9}, LimitError{Limit: "file size", Max: 9, Got: 10, Path: "b.yaml"}},
		{Limits{MaxTotalBytes: 12}, LimitError{Limit: "repository size", Max: 12, Got: 15, Path: "b.yaml"}},
	}
	for _, tt := range tests {
		t.Run(tt.want.Limit, func(t *testing.T) {
			_, err := build(t, tt.limits, files)
			var limitErr *LimitError
			if !errors.As(err, &limitErr) {
				t.Fatalf("got %v, want a LimitError", err)
			}
			if diff := cmp.Diff(tt.want, *limitErr); diff != "" {
				t.Errorf("LimitError (-want +got):\n%s", diff)
			}
		})
	}
	// A negative size cannot lower the running total.
	b := NewBuilder(Limits{MaxTotalBytes: 16}, nil)
	if err := b.AddFile("big.yaml", -1<<20, "big.yaml"); err == nil {
		t.Error("a file of negative size was added")
	}
	if _, err := build(t, Limits{MaxFiles: 3, MaxFileBytes: 10, MaxTotalBytes: 16}, files); err != nil {
		t.Errorf("a tree exactly at its limits: %v", err)
	}
}

func TestBuilderRejectsPathsOutsideTheRoot(t *testing.T) {
	for _, name := range []string{"../x", "/abs", "", "a/../../b"} {
		b := NewBuilder(Limits{}, nil)
		if err := b.AddFile(name, 1, name); !errors.Is(err, ErrEscapesRoot) {
			t.Errorf("AddFile(%q) = %v, want ErrEscapesRoot", name, err)
		}
	}
}

// FuzzResolve checks that no path and no symlink target resolves outside the
// root or to something that is not there, and that resolution terminates.
func FuzzResolve(f *testing.F) {
	for _, seed := range [][2]string{
		{"deploy/app.yaml", "app.yaml"},
		{"link/app.yaml", "deploy"},
		{"../x", "../x"},
		{"link", "/etc/passwd"},
		{"link/../../etc", "deploy/.."},
		{"a/b/c", "link"},
		{"link/nested/svc.yaml", "./deploy/"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, p, target string) {
		files := map[string]string{
			"README.md":              "r",
			"deploy/app.yaml":        "a",
			"deploy/nested/svc.yaml": "s",
			"link":                   "-> " + target,
			"deploy/inner":           "-> " + target,
		}
		tr, err := build(t, Limits{}, files)
		if err != nil {
			t.Fatal(err)
		}
		got, err := tr.Resolve(p)
		if err != nil {
			return
		}
		if got != "" && (path.Clean(got) != got || strings.HasPrefix(got, "/") || got == ".." || strings.HasPrefix(got, "../")) {
			t.Fatalf("Resolve(%q) with target %q = %q: not a clean path inside the root", p, target, got)
		}
		if e, isFile := tr.files[got]; isFile && e.symlink {
			t.Fatalf("Resolve(%q) = %q: a symlink, not what it points to", p, got)
		}
		if _, isFile := tr.files[got]; !isFile {
			if _, isDir := tr.dirs[got]; !isDir {
				t.Fatalf("Resolve(%q) with target %q = %q: nothing there", p, target, got)
			}
		}
	})
}

// lattice makes levels folders l0 … l{levels-1}, each holding two symlinks
// to the next one, and a file in the last: 2*levels entries that name
// 2^levels paths to that file.
func lattice(levels int) map[string]string {
	files := map[string]string{}
	for i := range levels - 1 {
		files[fmt.Sprintf("l%d/a", i)] = fmt.Sprintf("-> ../l%d", i+1)
		files[fmt.Sprintf("l%d/b", i)] = fmt.Sprintf("-> ../l%d", i+1)
	}
	files[fmt.Sprintf("l%d/cm.yaml", levels-1)] = "kind: ConfigMap"
	return files
}

func TestFilesCountsEveryListedPathAgainstTheLimit(t *testing.T) {
	t.Run("a lattice of 48 symlinks naming one file 2^24 times", func(t *testing.T) {
		tr, err := build(t, Limits{MaxFiles: 1000}, lattice(25))
		if err != nil {
			t.Fatal(err)
		}
		_, err = tr.Files("l0")
		var limitErr *LimitError
		if !errors.As(err, &limitErr) || limitErr.Max != 1000 || (limitErr.Limit != "listed folders" && limitErr.Limit != "listed files") {
			t.Fatalf("Files = %v, want a listed folders or files LimitError at 1000", err)
		}
	})
	t.Run("seven entries listing fifteen files", func(t *testing.T) {
		files := map[string]string{"e": "-> d", "f": "-> d"}
		for i := range 5 {
			files[fmt.Sprintf("d/%d.yaml", i)] = "x"
		}
		tr, err := build(t, Limits{MaxFiles: 10}, files)
		if err != nil {
			t.Fatal(err)
		}
		_, err = tr.Files("")
		var limitErr *LimitError
		if !errors.As(err, &limitErr) || limitErr.Limit != "listed files" || limitErr.Got != 11 {
			t.Fatalf("Files = %v, want a listed files LimitError at the 11th", err)
		}
	})
	t.Run("a tree within the limit lists every path", func(t *testing.T) {
		tr, err := build(t, Limits{MaxFiles: 1 << 10}, lattice(10))
		if err != nil {
			t.Fatal(err)
		}
		got, err := tr.Files("l0")
		if err != nil || len(got) != 1<<9 {
			t.Fatalf("Files = %d paths, %v; want %d", len(got), err, 1<<9)
		}
	})
}

func TestReadFileCountsEveryByteReadAgainstTheLimit(t *testing.T) {
	tr, err := build(t, Limits{MaxTotalBytes: 25}, map[string]string{"ten.yaml": "0123456789", "alias": "-> ten.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range []string{"ten.yaml", "alias"} {
		if _, err := tr.ReadFile(p); err != nil {
			t.Fatalf("read %d of 10 bytes: %v", i+1, err)
		}
	}
	_, err = tr.ReadFile("ten.yaml")
	var limitErr *LimitError
	if !errors.As(err, &limitErr) || limitErr.Limit != "bytes read" || limitErr.Got != 30 {
		t.Fatalf("the third read of 10 bytes with a 25-byte limit = %v, want a bytes read LimitError", err)
	}
}
