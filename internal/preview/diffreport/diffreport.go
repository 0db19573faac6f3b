// Package diffreport shows a reconcile.Preview to people and to programs:
// a unified YAML diff per object with created, updated, pruned and
// drifted markers and a summary line (Write), or JSON (WriteJSON). What
// it shows of an object is what an apply sets: server-set metadata
// (managedFields, resourceVersion, uid, …), status, and plumb's own
// bookkeeping annotations (content hash, revision) are left out. Secret
// values arrive masked (the Preview masks them).
package diffreport

import (
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/appview"
	"github.com/plumb-dev/plumb/internal/reconcile"
)

// Counts are how many objects of a preview each action concerns.
type Counts struct {
	Create    int `json:"create"`
	Update    int `json:"update"`
	Drift     int `json:"drift"`
	Prune     int `json:"prune"`
	Keep      int `json:"keep"`
	Unchanged int `json:"unchanged"`
	Refused   int `json:"refused"`
}

// CountsOf counts the objects of p by action.
func CountsOf(p *reconcile.Preview) Counts {
	var c Counts
	for _, o := range p.Objects {
		switch o.Action {
		case reconcile.PreviewCreate:
			c.Create++
		case reconcile.PreviewUpdate:
			c.Update++
		case reconcile.PreviewDrift:
			c.Drift++
		case reconcile.PreviewPrune:
			c.Prune++
		case reconcile.PreviewKeep:
			c.Keep++
		default:
			c.Unchanged++
		}
		if o.Refused != "" {
			c.Refused++
		}
	}
	return c
}

// Differs reports whether the live state differs from Git: an object
// would be created, updated or pruned, or is drifted.
func (c Counts) Differs() bool { return c.Create+c.Update+c.Drift+c.Prune > 0 }

// Options tune Write.
type Options struct {
	// Color marks added and removed lines with ANSI colours (for a
	// terminal).
	Color bool
}

// LineKind says what a line of a Section is.
type LineKind string

// The kinds of line.
const (
	LineNote    LineKind = "note"    // a drifted field, a field left to a manager, a refusal
	LineRefusal LineKind = "refusal" // the API server refuses the object
	LineFile    LineKind = "file"    // --- live / +++ revision
	LineHunk    LineKind = "hunk"    // @@ … @@
	LineAdd     LineKind = "add"
	LineRemove  LineKind = "remove"
	LineContext LineKind = "context"
)

// Line is one line of a Section, without its newline; every line is
// printable (control characters escaped).
type Line struct {
	Kind LineKind
	Text string
}

// Section is one object the next tick would change: its marker line
// (e.g. "~ ConfigMap/shop/web (updated)") and the lines under it.
type Section struct {
	Object reconcile.PreviewObject
	Header string
	Lines  []Line
}

// Sections are the objects of p that the next tick would change, each as
// Write shows it (the dashboard renders them as HTML).
func Sections(p *reconcile.Preview) ([]Section, error) {
	var out []Section
	for _, o := range p.Objects {
		if o.Action == reconcile.PreviewUnchanged {
			continue
		}
		sec := Section{Object: o, Header: appview.Printable(header(o, p.Suspended))}
		note := func(kind LineKind, text string) {
			sec.Lines = append(sec.Lines, Line{Kind: kind, Text: appview.Printable(text)})
		}
		for _, c := range o.Drift {
			line := fmt.Sprintf("    %s: %s → %s, by %s", c.Path, orAbsent(c.Before), orAbsent(c.After), who(c.Manager, c.Operation, c.Subresource))
			if c.Time != nil {
				line += " at " + c.Time.UTC().Format("2006-01-02T15:04:05Z")
			}
			note(LineNote, line)
		}
		for _, f := range o.LeftTo {
			note(LineNote, fmt.Sprintf("    %s: left to %s, which keeps changing it back (DriftConflict)", f.Path, f.Manager))
		}
		if o.Refused != "" {
			note(LineRefusal, "    the API server refuses it: "+o.Refused)
		}
		if o.Action != reconcile.PreviewKeep {
			text, err := unified(o, p.Revision)
			if err != nil {
				return nil, err
			}
			for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
				kind := LineContext
				switch {
				case line == "" && text == "":
					continue
				case strings.HasPrefix(line, "+++"), strings.HasPrefix(line, "---"):
					kind = LineFile
				case strings.HasPrefix(line, "+"):
					kind = LineAdd
				case strings.HasPrefix(line, "-"):
					kind = LineRemove
				case strings.HasPrefix(line, "@@"):
					kind = LineHunk
				}
				note(kind, line)
			}
		}
		out = append(out, sec)
	}
	return out, nil
}

// Write writes p as text: for each object the next tick would change, a
// marker line and a unified diff from live to Git; then a summary line.
func Write(w io.Writer, p *reconcile.Preview, opts Options) error {
	paint := func(code, s string) string {
		if !opts.Color {
			return s
		}
		return "\x1b[" + code + "m" + s + "\x1b[0m"
	}
	colors := map[LineKind]string{LineRefusal: "31", LineAdd: "32", LineRemove: "31", LineHunk: "36"}
	sections, err := Sections(p)
	if err != nil {
		return err
	}
	var b strings.Builder
	if p.Destination != "" {
		b.WriteString(paint("1", fmt.Sprintf("Destination: the cluster of Secret %s (%s)", appview.Printable(p.Destination), appview.Printable(p.Server))) + "\n")
	}
	for _, sec := range sections {
		b.WriteString(paint("1", sec.Header) + "\n")
		for _, line := range sec.Lines {
			if code, ok := colors[line.Kind]; ok {
				b.WriteString(paint(code, line.Text) + "\n")
			} else {
				b.WriteString(line.Text + "\n")
			}
		}
	}
	if len(p.Hooks) > 0 {
		b.WriteString(paint("1", "Hooks the next sync runs, in order:") + "\n")
		for _, h := range p.Hooks {
			b.WriteString(fmt.Sprintf("  %-8s wave %-3d %s\n", h.Phase, h.Wave, hookName(h)))
		}
	}
	b.WriteString(Summary(p) + "\n")
	_, err = io.WriteString(w, b.String())
	return err
}

// hookName names a hook of a preview (generateName*, for one without a name).
func hookName(h reconcile.PreviewHook) string {
	name := h.Name
	if name == "" {
		name = h.GenerateName + "*"
	}
	ref := h.ObjectRef
	ref.Name = name
	return appview.Printable(ref.String())
}

// Summary is the one-line summary of p.
func Summary(p *reconcile.Preview) string {
	c := CountsOf(p)
	if !c.Differs() && c.Refused == 0 {
		noun := "objects match"
		if c.Unchanged == 1 {
			noun = "object matches"
		}
		s := fmt.Sprintf("No differences: %d %s %s", c.Unchanged, noun, p.Revision)
		if c.Keep > 0 {
			s += fmt.Sprintf(" (%d that left Git kept by the prune guard)", c.Keep)
		}
		return s
	}
	parts := []string{}
	add := func(n int, what string) {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, what))
		}
	}
	add(c.Create, "to create")
	add(c.Update, "to update")
	add(c.Drift, "drifted")
	add(c.Prune, "to prune")
	add(c.Keep, "kept by the prune guard")
	add(c.Refused, "refused by the API server")
	s := fmt.Sprintf("Summary: %s; %d unchanged (%s)", strings.Join(parts, ", "), c.Unchanged, p.Revision)
	if p.Suspended {
		s += "; the App is suspended: nothing is applied until plumb resume"
	}
	if p.Waiting != "" {
		s += "; nothing is applied yet: " + appview.Printable(p.Waiting)
	}
	return s
}

// header is an object's marker line (suspended: the App's).
func header(o reconcile.PreviewObject, suspended bool) string {
	id := o.ObjectRef.String()
	switch o.Action {
	case reconcile.PreviewCreate:
		return "+ " + id + " (created)"
	case reconcile.PreviewUpdate:
		return "~ " + id + " (updated)"
	case reconcile.PreviewPrune:
		return "- " + id + " (pruned: it left Git)"
	case reconcile.PreviewKeep:
		return "= " + id + " (left Git, kept: " + o.Kept + ")"
	case reconcile.PreviewDrift:
		var managers []string
		for _, c := range o.Drift {
			if m := who(c.Manager, "", ""); !slices.Contains(managers, m) {
				managers = append(managers, m)
			}
		}
		for _, f := range o.LeftTo {
			if !slices.Contains(managers, f.Manager) {
				managers = append(managers, f.Manager)
			}
		}
		what := "drifted"
		if o.Deleted {
			what = "drifted: deleted"
		}
		if len(managers) > 0 {
			what += " by " + strings.Join(managers, ", ")
		}
		switch {
		case o.Left && len(o.LeftTo) > 0 && len(o.Drift) == 0:
			what += "; left to it (DriftConflict)"
		case o.Left:
			what += "; left so (driftPolicy alert)"
		case suspended:
			what += "; the App is suspended: put back once it is resumed"
		default:
			what += "; the next tick puts it back"
		}
		return "! " + id + " (" + what + ")"
	}
	return "  " + id
}

func who(manager, operation, subresource string) string {
	if manager == "" {
		manager = "unknown"
	}
	var details []string
	if operation != "" {
		details = append(details, operation)
	}
	if subresource != "" {
		details = append(details, "subresource "+subresource)
	}
	if len(details) == 0 {
		return manager
	}
	return manager + " (" + strings.Join(details, ", ") + ")"
}

func orAbsent(v string) string {
	if v == "" {
		return "(absent)"
	}
	return v
}

// unified is the unified diff from the live object to Git's.
func unified(o reconcile.PreviewObject, revision string) (string, error) {
	before, err := yamlOf(o.Live)
	if err != nil {
		return "", err
	}
	after, err := yamlOf(o.Next)
	if err != nil {
		return "", err
	}
	lines := func(text string) []string {
		if text == "" {
			return nil
		}
		return difflib.SplitLines(text)
	}
	return difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: lines(before), B: lines(after),
		FromFile: "live", ToFile: revision, Context: 3,
	})
}

func yamlOf(u *unstructured.Unstructured) (string, error) {
	if u == nil {
		return "", nil
	}
	data, err := yaml.Marshal(Normalize(u))
	if err != nil {
		return "", fmt.Errorf("encoding %s %s: %w", u.GetKind(), u.GetName(), err)
	}
	return string(data), nil
}

// Normalize is what the report shows of an object: a copy without the
// metadata the API server sets, without status, and without plumb's
// bookkeeping annotations.
func Normalize(u *unstructured.Unstructured) map[string]any {
	c := u.DeepCopy().Object
	delete(c, "status")
	if metadata, ok := c["metadata"].(map[string]any); ok {
		for _, f := range []string{"managedFields", "resourceVersion", "uid", "generation", "creationTimestamp", "selfLink"} {
			delete(metadata, f)
		}
		if annotations, ok := metadata["annotations"].(map[string]any); ok {
			delete(annotations, plumbv1.AnnotationContentHash)
			delete(annotations, plumbv1.AnnotationRevision)
			if len(annotations) == 0 {
				delete(metadata, "annotations")
			}
		}
	}
	return c
}

// Fields are the fields that differ between two objects, as normalised:
// ".data.greeting", ".metadata.labels[app]", ".spec.ports[0].port"; a
// list whose length changed is one field. An object created or deleted
// (before or after nil) is the one field ".".
func Fields(before, after *unstructured.Unstructured) []string {
	if before == nil || after == nil {
		if before == after {
			return nil
		}
		return []string{"."}
	}
	var a, b any
	a, b = Normalize(before), Normalize(after)
	var out []string
	walk("", a, b, &out)
	sort.Strings(out)
	return out
}

func walk(path string, a, b any, out *[]string) {
	if reflect.DeepEqual(a, b) {
		return
	}
	am, aIsMap := a.(map[string]any)
	bm, bIsMap := b.(map[string]any)
	if (aIsMap || a == nil) && (bIsMap || b == nil) && (aIsMap || bIsMap) {
		keys := map[string]bool{}
		for k := range am {
			keys[k] = true
		}
		for k := range bm {
			keys[k] = true
		}
		for k := range keys {
			walk(child(path, k), am[k], bm[k], out)
		}
		return
	}
	al, aIsList := a.([]any)
	bl, bIsList := b.([]any)
	if aIsList && bIsList && len(al) == len(bl) {
		for i := range al {
			walk(fmt.Sprintf("%s[%d]", path, i), al[i], bl[i], out)
		}
		return
	}
	if path == "" {
		path = "."
	}
	*out = append(*out, path)
}

func child(path, key string) string {
	if key != "" && strings.IndexFunc(key, func(r rune) bool {
		return !(r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) < 0 {
		return path + "." + key
	}
	return path + "[" + key + "]"
}

// JSONReport is the machine-readable form of a preview.
type JSONReport struct {
	App string `json:"app"`
	// Destination and Server name the cluster the App deploys into, when
	// it is not the one plumb runs in.
	Destination string       `json:"destination,omitempty"`
	Server      string       `json:"server,omitempty"`
	Revision    string       `json:"revision"`
	Suspended   bool         `json:"suspended,omitempty"`
	Waiting     string       `json:"waiting,omitempty"`
	Differs     bool         `json:"differs"`
	Counts      Counts       `json:"counts"`
	Objects     []JSONObject `json:"objects"`
	// Hooks are the hooks the next sync runs, in order.
	Hooks []JSONHook `json:"hooks,omitempty"`
}

// JSONHook is a hook the next sync runs.
type JSONHook struct {
	plumbv1.ObjectRef
	GenerateName string `json:"generateName,omitempty"`
	Phase        string `json:"phase"`
	Wave         int    `json:"wave"`
}

// JSONObject is one object of a JSONReport; unchanged objects are left
// out.
type JSONObject struct {
	plumbv1.ObjectRef
	Action string `json:"action"`
	// Fields are the fields the next tick would change (Fields).
	Fields  []string    `json:"fields,omitempty"`
	Drift   []JSONDrift `json:"drift,omitempty"`
	Deleted bool        `json:"deleted,omitempty"`
	Left    bool        `json:"left,omitempty"`
	Kept    string      `json:"kept,omitempty"`
	LeftTo  []JSONLeft  `json:"leftTo,omitempty"`
	Refused string      `json:"refused,omitempty"`
	Diff    string      `json:"diff,omitempty"`
}

// JSONLeft is one field left to another manager (DriftConflict).
type JSONLeft struct {
	Path    string `json:"path"`
	Manager string `json:"manager"`
}

// JSONDrift is one field someone else changed.
type JSONDrift struct {
	Path        string `json:"path"`
	Before      string `json:"before,omitempty"`
	After       string `json:"after,omitempty"`
	Manager     string `json:"manager"`
	Operation   string `json:"operation,omitempty"`
	Subresource string `json:"subresource,omitempty"`
	Time        string `json:"time,omitempty"`
}

// Report is p as a JSONReport for the App app ("namespace/name").
func Report(app string, p *reconcile.Preview) (*JSONReport, error) {
	counts := CountsOf(p)
	r := &JSONReport{App: app, Destination: p.Destination, Server: p.Server, Revision: p.Revision, Suspended: p.Suspended, Waiting: p.Waiting, Differs: counts.Differs(), Counts: counts, Objects: []JSONObject{}}
	for _, h := range p.Hooks {
		r.Hooks = append(r.Hooks, JSONHook{ObjectRef: h.ObjectRef, GenerateName: h.GenerateName, Phase: h.Phase, Wave: h.Wave})
	}
	for _, o := range p.Objects {
		if o.Action == reconcile.PreviewUnchanged {
			continue
		}
		j := JSONObject{ObjectRef: o.ObjectRef, Action: string(o.Action), Deleted: o.Deleted, Left: o.Left, Kept: o.Kept, Refused: o.Refused}
		if o.Action != reconcile.PreviewKeep {
			j.Fields = Fields(o.Live, o.Next)
			text, err := unified(o, p.Revision)
			if err != nil {
				return nil, err
			}
			j.Diff = text
		}
		for _, f := range o.LeftTo {
			j.LeftTo = append(j.LeftTo, JSONLeft{Path: f.Path, Manager: f.Manager})
		}
		for _, c := range o.Drift {
			d := JSONDrift{Path: c.Path, Before: c.Before, After: c.After, Manager: c.Manager, Operation: c.Operation, Subresource: c.Subresource}
			if c.Time != nil {
				d.Time = c.Time.UTC().Format("2006-01-02T15:04:05Z")
			}
			j.Drift = append(j.Drift, d)
		}
		r.Objects = append(r.Objects, j)
	}
	return r, nil
}

// WriteJSON writes p as an indented JSONReport.
func WriteJSON(w io.Writer, app string, p *reconcile.Preview) error {
	r, err := Report(app, p)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
