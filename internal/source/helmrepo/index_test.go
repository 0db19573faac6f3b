package helmrepo_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.yaml.in/yaml/v3"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/repo"

	"github.com/plumb-dev/plumb/internal/source/helmrepo"
)

// helmIndex is an index as helm writes it (`helm repo index` uses the
// same writer), with descriptions that hold the awkward parts of YAML:
// block scalars with blank lines and lines that start with '#' or "- ",
// and quoted names.
func helmIndex(t testing.TB, charts, versions int) *repo.IndexFile {
	t.Helper()
	index := repo.NewIndexFile()
	for c := range charts {
		for v := range versions {
			md := &chart.Metadata{
				APIVersion: chart.APIVersionV2, Name: fmt.Sprintf("chart-%03d", c), Version: fmt.Sprintf("1.%d.0", v),
				Description: fmt.Sprintf("Chart %d.\n\n# Not a comment\n- not an item\nentries:\n  not-a-chart:\n", c),
				Keywords:    []string{"a", "b: c"}, Home: "https://example.com/" + fmt.Sprint(c),
				Maintainers: []*chart.Maintainer{{Name: "Someone", Email: "someone@example.com"}},
				Annotations: map[string]string{"artifacthub.io/changes": "- kind: added\n  description: things\n"},
			}
			digest := fmt.Sprintf("%064x", c*1000+v)
			if err := index.MustAdd(md, fmt.Sprintf("%s-%s.tgz", md.Name, md.Version), "https://charts.example.com/", digest); err != nil {
				t.Fatal(err)
			}
		}
	}
	index.SortEntries()
	return index
}

// firstURL is what an index keeps of a version's URLs: the first, which
// Helm downloads.
func firstURL(urls []string) []string {
	if len(urls) == 0 {
		return nil
	}
	return urls[:1]
}

// sameIndex compares indexes by what they hold, not by their estimate of
// its heap.
var sameIndex = cmpopts.IgnoreUnexported(helmrepo.Index{})

// want is what ParseIndex must keep of helm's own reading of the index.
func want(index *repo.IndexFile) *helmrepo.Index {
	out := &helmrepo.Index{Charts: map[string][]helmrepo.ChartVersion{}}
	for name, versions := range index.Entries {
		kept := []helmrepo.ChartVersion{}
		for _, v := range versions {
			kept = append(kept, helmrepo.ChartVersion{Version: v.Version, URLs: firstURL(v.URLs), Digest: v.Digest})
		}
		out.Charts[name] = kept
	}
	return out
}

// streamed are limits under which an index parsed whole would fail: a
// parse that passes was streamed.
func streamed() helmrepo.IndexLimits {
	l := helmrepo.DefaultIndexLimits()
	l.MaxWholeBytes = 1
	return l
}

func writeHelm(t testing.TB, index *repo.IndexFile) []byte {
	t.Helper()
	file := filepath.Join(t.TempDir(), "index.yaml")
	if err := index.WriteFile(file, 0o644); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func parse(t *testing.T, data []byte, limits helmrepo.IndexLimits) *helmrepo.Index {
	t.Helper()
	got, err := helmrepo.ParseIndex(bytes.NewReader(data), limits)
	if err != nil {
		t.Fatal(err)
	}
	for name, versions := range got.Charts {
		if versions == nil {
			got.Charts[name] = []helmrepo.ChartVersion{}
		}
	}
	return got
}

func TestAnIndexHelmWroteIsStreamedToWhatHelmReads(t *testing.T) {
	index := helmIndex(t, 5, 4)
	data := writeHelm(t, index)
	// Helm's own reading of the same bytes is the oracle.
	file := filepath.Join(t.TempDir(), "index.yaml")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	helmRead, err := repo.LoadIndexFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want(helmRead), parse(t, data, streamed()), sameIndex); diff != "" {
		t.Errorf("ParseIndex (-helm +plumb):\n%s", diff)
	}
	if n := want(helmRead).Versions(); n != 20 {
		t.Fatalf("the oracle read %d versions, want 20", n)
	}
}

func TestOtherLayoutsOfAnIndexAreRead(t *testing.T) {
	index := helmIndex(t, 3, 2)
	expected := want(index)

	// yaml.v3 indents a sequence under its key; a comment, CRLF line ends,
	// quoted names and an empty chart are valid YAML too.
	var doc bytes.Buffer
	enc := yaml.NewEncoder(&doc)
	enc.SetIndent(4)
	type wire struct {
		APIVersion string                         `yaml:"apiVersion"`
		Entries    map[string][]map[string]any    `yaml:"entries"`
		Other      map[string]map[string][]string `yaml:"serverInfo"`
	}
	w := wire{APIVersion: "v1", Entries: map[string][]map[string]any{}, Other: map[string]map[string][]string{"x": {"entries": {"y"}}}}
	for name, versions := range index.Entries {
		for _, v := range versions {
			w.Entries[name] = append(w.Entries[name], map[string]any{"version": v.Version, "urls": v.URLs, "digest": v.Digest, "description": v.Description})
		}
	}
	if err := enc.Encode(w); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(expected, parse(t, doc.Bytes(), streamed()), sameIndex); diff != "" {
		t.Errorf("yaml.v3's layout (-want +got):\n%s", diff)
	}

	crlf := "# an index\r\napiVersion: v1\r\nentries:\r\n  # a comment\r\n  \"quoted\":\r\n  - version: 2.0.0\r\n    urls: [q-2.0.0.tgz]\r\n\r\n  empty: []\r\ngenerated: now\r\n"
	got := parse(t, []byte(crlf), streamed())
	if diff := cmp.Diff(&helmrepo.Index{Charts: map[string][]helmrepo.ChartVersion{
		"quoted": {{Version: "2.0.0", URLs: []string{"q-2.0.0.tgz"}}}, "empty": {},
	}}, got, sameIndex); diff != "" {
		t.Errorf("CRLF, comments and quoted names (-want +got):\n%s", diff)
	}

	// JSON is streamed too.
	data, err := json.Marshal(index)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(expected, parse(t, data, streamed()), sameIndex); diff != "" {
		t.Errorf("JSON (-want +got):\n%s", diff)
	}

	// Flow style is parsed whole, within its bound.
	flow := `{apiVersion: v1, entries: {a: [{version: 1.0.0, urls: [a.tgz], digest: "00"}]}}`
	wantFlow := &helmrepo.Index{Charts: map[string][]helmrepo.ChartVersion{"a": {{Version: "1.0.0", URLs: []string{"a.tgz"}, Digest: "00"}}}}
	if diff := cmp.Diff(wantFlow, parse(t, []byte(flow), helmrepo.DefaultIndexLimits()), sameIndex); diff != "" {
		t.Errorf("flow style (-want +got):\n%s", diff)
	}
	mixed := "apiVersion: v1\nentries:\n  a: [{version: 1.0.0, urls: [a.tgz], digest: \"00\"}]\n"
	if diff := cmp.Diff(wantFlow, parse(t, []byte(mixed), helmrepo.DefaultIndexLimits()), sameIndex); diff != "" {
		t.Errorf("a chart's versions in flow style (-want +got):\n%s", diff)
	}
	if _, err := helmrepo.ParseIndex(strings.NewReader(mixed), streamed()); !errors.Is(err, helmrepo.ErrLimitExceeded) || !strings.Contains(err.Error(), "parsed whole") {
		t.Errorf("flow style past MaxWholeBytes: %v, want %v saying it is parsed whole", err, helmrepo.ErrLimitExceeded)
	}
}

func TestABadOrHugeIndexIsRefusedWithItsReason(t *testing.T) {
	limits := helmrepo.DefaultIndexLimits()
	small := limits
	small.MaxBytes = 4096
	huge := writeHelm(t, helmIndex(t, 10, 5))
	longEntry := "entries:\n  a:\n  - version: 1.0.0\n" + strings.Repeat("    description: x\n", 70_000)
	for name, c := range map[string]struct {
		data   string
		limits helmrepo.IndexLimits
		is     error
		says   string
	}{
		"empty":             {"\n\n", limits, helmrepo.ErrInvalidIndex, "empty"},
		"not an index":      {"hello: world\n", limits, helmrepo.ErrInvalidIndex, "no entries"},
		"not YAML":          {"entries:\n  a:\n  - version: [\n", limits, helmrepo.ErrInvalidIndex, "entries.a[0]"},
		"a stray line":      {"entries:\n    a:\n  - version: 1\n", limits, helmrepo.ErrInvalidIndex, "indented less"},
		"a chart twice":     {"entries:\n  a: []\n  a: []\n", limits, helmrepo.ErrInvalidIndex, "listed twice"},
		"larger than bound": {string(huge), small, helmrepo.ErrLimitExceeded, "larger than 4096 bytes"},
		"an endless line":   {"entries:\n  a:\n  - version: " + strings.Repeat("9", 2<<20) + "\n", limits, helmrepo.ErrLimitExceeded, "a line"},
		"an endless entry":  {longEntry, limits, helmrepo.ErrLimitExceeded, `a version of chart "a"`},
		"endless blanks":    {"entries:\n  a:\n  - version: 1\n    description: |\n" + strings.Repeat("\n", 2<<20), limits, helmrepo.ErrLimitExceeded, `a version of chart "a"`},
		"JSON not an index": {`{"apiVersion": "v1"}`, limits, helmrepo.ErrInvalidIndex, "no entries"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := helmrepo.ParseIndex(strings.NewReader(c.data), c.limits)
			if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.says) {
				t.Errorf("got %v, want %v saying %q", err, c.is, c.says)
			}
		})
	}
}

// FuzzParseIndex holds the streamed reading to a whole parse of the same
// bytes: when both read an index, they read the same one.
func FuzzParseIndex(f *testing.F) {
	f.Add(string(writeHelm(f, helmIndex(f, 2, 2))))
	f.Add("entries:\n  a:\n  - version: 1.0.0\n    urls:\n    - a.tgz\n    description: |\n      # x\n\n      - y\n  b: []\n")
	f.Add("apiVersion: v1\nentries:\n    a:\n        -   version: '1'\n            digest: \"d\"\n")
	f.Fuzz(func(t *testing.T, data string) {
		got, err := helmrepo.ParseIndex(strings.NewReader(data), helmrepo.DefaultIndexLimits())
		if err != nil {
			return
		}
		var whole struct {
			Entries map[string][]struct {
				Version string   `yaml:"version"`
				URLs    []string `yaml:"urls"`
				Digest  string   `yaml:"digest"`
			} `yaml:"entries"`
		}
		if yaml.Unmarshal([]byte(data), &whole) != nil {
			return // the stream is laxer on what it does not keep
		}
		expected := &helmrepo.Index{Charts: map[string][]helmrepo.ChartVersion{}}
		for name, versions := range whole.Entries {
			kept := []helmrepo.ChartVersion{}
			for _, v := range versions {
				kept = append(kept, helmrepo.ChartVersion{Version: v.Version, URLs: firstURL(v.URLs), Digest: v.Digest})
			}
			expected.Charts[name] = kept
		}
		for name, versions := range got.Charts {
			if versions == nil {
				got.Charts[name] = []helmrepo.ChartVersion{}
			}
		}
		if diff := cmp.Diff(expected, got, sameIndex); diff != "" {
			t.Errorf("streamed (+) and whole (-) readings differ:\n%s", diff)
		}
	})
}

// retainedHeap is the live heap that what parse returns holds, measured
// after collections before and after.
func retainedHeap(parse func() any) (any, int64) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&before)
	kept := parse()
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&after)
	return kept, int64(after.HeapAlloc) - int64(before.HeapAlloc)
}

// An index's RetainedBytes, which the budgets count, is not below the
// heap it really keeps, for an index as helm writes it and for the
// layouts that keep most per byte read: a million tiny versions, and
// versions that list many URLs (only the first is kept). Past
// MaxRetainedBytes the parse stops with LimitExceeded, however few bytes
// the index has.
func TestAnIndexCountsTheHeapItKeeps(t *testing.T) {
	var tiny, urls strings.Builder
	tiny.WriteString("entries:\n  a:\n")
	for v := range 50_000 {
		fmt.Fprintf(&tiny, "  - version: %d\n", v)
	}
	urls.WriteString("entries:\n  a:\n")
	for v := range 5_000 {
		fmt.Fprintf(&urls, "  - version: %d\n    urls: [%s]\n", v, strings.TrimSuffix(strings.Repeat("https://x.example/a.tgz,", 32), ","))
	}
	for name, data := range map[string][]byte{
		"as helm writes it":   writeHelm(t, helmIndex(t, 40, 50)),
		"tiny versions":       []byte(tiny.String()),
		"many URLs a version": []byte(urls.String()),
	} {
		t.Run(name, func(t *testing.T) {
			kept, heap := retainedHeap(func() any {
				index, err := helmrepo.ParseIndex(bytes.NewReader(data), helmrepo.DefaultIndexLimits())
				if err != nil {
					t.Fatal(err)
				}
				return index
			})
			index := kept.(*helmrepo.Index)
			if index.RetainedBytes() < heap {
				t.Errorf("RetainedBytes %d, below the %d bytes of heap the index keeps (%d bytes read)", index.RetainedBytes(), heap, len(data))
			}
			t.Logf("%d bytes read, %d kept on the heap, %d counted", len(data), heap, index.RetainedBytes())
			limits := helmrepo.DefaultIndexLimits()
			limits.MaxRetainedBytes = index.RetainedBytes() / 2
			if _, err := helmrepo.ParseIndex(bytes.NewReader(data), limits); !errors.Is(err, helmrepo.ErrLimitExceeded) || !strings.Contains(err.Error(), "bytes of memory") {
				t.Errorf("past MaxRetainedBytes: %v, want %v", err, helmrepo.ErrLimitExceeded)
			}
		})
	}
}
