package tree

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A folder taken out as a tree of its own keeps its files (read through
// the same loader) under paths relative to it, and a symlink out of it
// leaves the new root.
func TestSubIsAFolderAsATree(t *testing.T) {
	tr, err := build(t, Limits{}, map[string]string{
		"README.md":              "hello",
		"deploy/app.yaml":        "kind: A",
		"deploy/nested/svc.yaml": "kind: B",
		"deploy/alias.yaml":      "-> app.yaml",
		"deploy/up.yaml":         "-> ../README.md",
		"linked":                 "-> deploy",
	})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := tr.Sub("linked", Limits{MaxFiles: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"alias.yaml", "app.yaml", "nested/svc.yaml"} {
		if !sub.Exists(name) {
			t.Errorf("%s is not in the sub-tree", name)
		}
	}
	if data, err := sub.ReadFile("alias.yaml"); err != nil || string(data) != "kind: A" {
		t.Errorf("alias.yaml = %q, %v; want kind: A", data, err)
	}
	if _, err := sub.Resolve("up.yaml"); !errors.Is(err, ErrEscapesRoot) {
		t.Errorf("up.yaml (to ../README.md) resolved: %v; want ErrEscapesRoot", err)
	}
	if sub.FileCount() != 4 || sub.Exists("README.md") {
		t.Errorf("the sub-tree holds %d entries (README.md: %t); want the 4 of deploy/", sub.FileCount(), sub.Exists("README.md"))
	}
	if _, err := tr.Sub("deploy", Limits{MaxFiles: 2}); !isLimit(err, "file count") {
		t.Errorf("a folder of 4 files in a limit of 2: %v; want the file count exceeded", err)
	}
	if _, err := tr.Sub("README.md", Limits{}); err == nil {
		t.Error("a file taken as a folder: no error")
	}
}

// Trees grafted under folders are read through their own loaders, and
// the whole keeps the base tree's limits.
func TestGraftAddsTreesWithinTheBaseLimits(t *testing.T) {
	base, err := build(t, Limits{MaxFiles: 4, MaxTotalBytes: 100}, map[string]string{"chart/Chart.yaml": "name: a"})
	if err != nil {
		t.Fatal(err)
	}
	dep, err := build(t, Limits{}, map[string]string{"b/Chart.yaml": "name: b", "b/templates/x.yaml": "kind: X"})
	if err != nil {
		t.Fatal(err)
	}
	grafted, err := base.Graft(map[string]*Tree{"chart/charts": dep})
	if err != nil {
		t.Fatal(err)
	}
	files, _ := grafted.Files("chart")
	if diff := cmp.Diff([]string{"chart/Chart.yaml", "chart/charts/b/Chart.yaml", "chart/charts/b/templates/x.yaml"}, files); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
	for name, want := range map[string]string{"chart/Chart.yaml": "name: a", "chart/charts/b/templates/x.yaml": "kind: X"} {
		if data, err := grafted.ReadFile(name); err != nil || string(data) != want {
			t.Errorf("%s = %q, %v; want %q", name, data, err, want)
		}
	}
	if grafted.Limits() != base.Limits() {
		t.Errorf("limits %+v; want the base's %+v", grafted.Limits(), base.Limits())
	}
	if _, err := base.Graft(map[string]*Tree{"chart/charts": dep, "other": dep}); !isLimit(err, "file count") {
		t.Errorf("5 files in a limit of 4: %v; want the file count exceeded", err)
	}
	if _, err := base.Graft(map[string]*Tree{"": base}); err == nil {
		t.Error("a path grafted over one the base holds: no error")
	}
	if _, err := base.Graft(map[string]*Tree{"../up": dep}); !errors.Is(err, ErrEscapesRoot) {
		t.Errorf("grafted above the root: %v; want ErrEscapesRoot", err)
	}
}

func isLimit(err error, limit string) bool {
	var l *LimitError
	return errors.As(err, &l) && l.Limit == limit
}

// A grafted tree's symlinks must resolve inside it: one that leaves it
// would, once grafted, name a file of the base tree (a dependency's
// archive reaching into the repository that uses it), and is refused.
func TestAGraftedSymlinkStaysInItsTree(t *testing.T) {
	base, err := build(t, Limits{}, map[string]string{"chart/Chart.yaml": "name: a", "secret.yaml": "kind: Secret"})
	if err != nil {
		t.Fatal(err)
	}
	inside, err := build(t, Limits{}, map[string]string{"b/Chart.yaml": "name: b", "b/files/x": "-> ../Chart.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	grafted, err := base.Graft(map[string]*Tree{"chart/charts": inside})
	if err != nil {
		t.Fatalf("a symlink inside the grafted tree: %v", err)
	}
	if data, err := grafted.ReadFile("chart/charts/b/files/x"); err != nil || string(data) != "name: b" {
		t.Errorf("the link read %q, %v; want the grafted Chart.yaml", data, err)
	}
	for name, target := range map[string]string{
		"up to the base":   "-> ../../../../secret.yaml",
		"absolute":         "-> /secret.yaml",
		"dangling":         "-> ../nothing.yaml",
		"through a folder": "-> ../../../chart",
	} {
		escaping, err := build(t, Limits{}, map[string]string{"b/Chart.yaml": "name: b", "b/files/x": target})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := base.Graft(map[string]*Tree{"chart/charts": escaping}); err == nil {
			t.Errorf("%s (%s): grafted; want it refused", name, target)
		}
	}
}
