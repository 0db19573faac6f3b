// Package appview shows Apps to people, from their status alone: the
// table of `plumb get apps`, the detail of `plumb get app`, the inventory
// tree of `plumb tree`, and the outcome of a sync. Ages are computed from
// the time the caller passes, so that output is reproducible.
package appview

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/revision"
	"github.com/plumb-dev/plumb/internal/source/git"
)

// TableOptions tune Table.
type TableOptions struct {
	// AllNamespaces adds a NAMESPACE column.
	AllNamespaces bool
	// Wide adds HEALTH, SUSPENDED and SOURCE columns and does not shorten
	// messages.
	Wide bool
	// NoHeaders leaves the header line out (for the rows a watch adds).
	NoHeaders bool
	// Deleted marks the rows as of Apps just deleted (a watch's).
	Deleted bool
	Now     time.Time
}

// maxMessage is how much of Ready's message a table row shows (not wide).
const maxMessage = 80

// Table writes one row per App: NAME, READY, REVISION, LAST TICK, DRIFT,
// FAILING PHASE and MESSAGE.
func Table(w io.Writer, apps []plumbv1.App, opts TableOptions) error {
	tw := tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
	var header []string
	if opts.AllNamespaces {
		header = append(header, "NAMESPACE")
	}
	header = append(header, "NAME", "READY", "REVISION", "LAST TICK", "DRIFT", "FAILING PHASE")
	if opts.Wide {
		header = append(header, "HEALTH", "SUSPENDED", "SOURCE")
	}
	header = append(header, "MESSAGE")
	if !opts.NoHeaders {
		fmt.Fprintln(tw, strings.Join(header, "\t"))
	}
	for i := range apps {
		app := &apps[i]
		var row []string
		if opts.AllNamespaces {
			row = append(row, app.Namespace)
		}
		row = append(row, app.Name, readyOf(app), ShortRevision(app.Status.LastAppliedRevision), Age(app.Status.LastTickTime, opts.Now),
			fmt.Sprint(DriftCount(app)), orDash(FailingPhase(app)))
		message := messageOf(app)
		if opts.Deleted {
			message = "(deleted)"
		}
		if opts.Wide {
			row = append(row, orDash(conditionReason(app, plumbv1.ConditionHealthy)), fmt.Sprint(app.Spec.Suspend), SourceOf(app))
		} else if runes := []rune(message); len(runes) > maxMessage {
			message = string(runes[:maxMessage-3]) + "..."
		}
		row = append(row, message)
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}

// readyOf is the Ready condition's status ("-" before the first tick).
func readyOf(app *plumbv1.App) string {
	if c := apimeta.FindStatusCondition(app.Status.Conditions, plumbv1.ConditionReady); c != nil {
		return string(c.Status)
	}
	return "-"
}

// messageOf is what a row says: suspended, or Ready's message on one line.
func messageOf(app *plumbv1.App) string {
	message := ""
	if c := apimeta.FindStatusCondition(app.Status.Conditions, plumbv1.ConditionReady); c != nil {
		message = OneLine(c.Message)
	}
	if app.Spec.Suspend {
		return "suspended; " + message
	}
	return message
}

// DriftCount is how many objects of the App are left drifted.
func DriftCount(app *plumbv1.App) int32 {
	if app.Status.Drift == nil {
		return 0
	}
	return app.Status.Drift.Count
}

func conditionReason(app *plumbv1.App, condition string) string {
	if c := apimeta.FindStatusCondition(app.Status.Conditions, condition); c != nil {
		return c.Reason
	}
	return ""
}

// FailingPhase is the phase whose last run failed (read, observe, diff or
// apply), or health when the objects failed their check; "" when none.
func FailingPhase(app *plumbv1.App) string {
	for _, p := range Phases(app) {
		if p.Status.ConsecutiveFailures > 0 {
			return p.Name
		}
	}
	if c := apimeta.FindStatusCondition(app.Status.Conditions, plumbv1.ConditionReady); c != nil && c.Reason == plumbv1.ReasonHealthCheckFailed {
		return "health"
	}
	return ""
}

// NamedPhase is one phase of an App's status with its name (read,
// observe, diff or apply).
type NamedPhase struct {
	Name   string
	Status plumbv1.PhaseStatus
}

// Phases are the App's phases in the order a tick runs them.
func Phases(app *plumbv1.App) []NamedPhase {
	p := app.Status.Phases
	return []NamedPhase{{"read", p.Read}, {"observe", p.Observe}, {"diff", p.Diff}, {"apply", p.Apply}}
}

// APIMessage is the API server's message in err (its Status), or err's
// text.
func APIMessage(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Message != "" {
		return status.Status().Message
	}
	return err.Error()
}

// ShortRevision is a recorded revision with its digest cut to
// revision.ShortLength digits ("main@sha1:1a2b3c4",
// "v1.0.0@sha256:1a2b3c4"); "-" when there is none.
func ShortRevision(rev string) string {
	if rev == "" {
		return "-"
	}
	return revision.Parse(rev).Short()
}

// Age is how long before now t was, as kubectl shows ages ("-" for none).
func Age(t *metav1.Time, now time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

// SourceOf is the App's source: URL, ref and path, or a chart's
// repository, name and version, or a bucket's endpoint, name and prefix.
func SourceOf(app *plumbv1.App) string {
	s := app.Spec.Source
	path := s.Path
	if path == "" {
		path = "."
	}
	if h := s.Helm; h != nil {
		version := "latest version"
		if h.Version != "" {
			version = "version " + h.Version
		}
		return h.Repository + " chart " + h.Chart + " " + version
	}
	if b := s.Bucket; b != nil {
		prefix := strings.Trim(b.Prefix, "/")
		if prefix == "" {
			prefix = "(all)"
		}
		return b.Endpoint + " bucket " + b.Bucket + " prefix " + prefix + " " + path
	}
	if o := s.OCI; o != nil {
		at := "tag latest"
		switch {
		case o.Ref.Digest != "":
			at = "digest " + revision.Revision{Digest: o.Ref.Digest}.Short()
		case o.Ref.SemVer != "":
			at = "semver " + o.Ref.SemVer
		case o.Ref.Tag != "":
			at = "tag " + o.Ref.Tag
		}
		return o.URL + " " + at + " " + path
	}
	g := s.GitRepository()
	ref := g.Ref
	var at string
	switch {
	case ref.Commit != "":
		at = "commit " + git.Revision{Hash: ref.Commit}.ShortHash()
	case ref.Tag != "":
		at = "tag " + ref.Tag
	case ref.SemVer != "":
		at = "semver " + ref.SemVer
	default:
		at = "branch " + ref.Branch
	}
	return g.URL + " " + at + " " + path
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Conditions are the conditions an App's detail shows, in this order
// (SourceVerified only where the source asks for verification).
var Conditions = []string{plumbv1.ConditionReady, plumbv1.ConditionHealthy, plumbv1.ConditionDrifted,
	plumbv1.ConditionReconciling, plumbv1.ConditionStalled, plumbv1.ConditionSourceVerified}

// Detail writes the App's state: source and revisions, conditions, each
// phase, the last change set, drift (and its episodes, from events),
// health, and the App's recent events (newest last).
func Detail(w io.Writer, app *plumbv1.App, events []corev1.Event, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	line := func(format string, args ...any) { fmt.Fprintf(tw, format+"\n", args...) }
	line("App:\t%s/%s", app.Namespace, app.Name)
	line("Source:\t%s", SourceOf(app))
	line("Applied:\t%s", orDash(app.Status.LastAppliedRevision))
	if a := app.Status.LastAttemptedRevision; a != "" && a != app.Status.LastAppliedRevision {
		line("Attempted:\t%s", a)
	}
	line("Suspended:\t%t", app.Spec.Suspend)
	line("Last tick:\t%s ago (last successful: %s ago)", Age(app.Status.LastTickTime, now), Age(app.Status.LastSuccessfulTickTime, now))
	line("")
	line("CONDITION\tSTATUS\tREASON\tSINCE\tMESSAGE")
	for _, c := range Conditions {
		if cond := apimeta.FindStatusCondition(app.Status.Conditions, c); cond != nil {
			line("%s\t%s\t%s\t%s\t%s", c, cond.Status, cond.Reason, Age(&cond.LastTransitionTime, now), OneLine(cond.Message))
		}
	}
	line("")
	line("PHASE\tLAST SUCCESS\tLAST FAILURE\tFAILURES\tREASON\tERROR")
	for _, p := range Phases(app) {
		line("%s\t%s\t%s\t%d\t%s\t%s", p.Name, Age(p.Status.LastSuccessTime, now), Age(p.Status.LastFailureTime, now),
			p.Status.ConsecutiveFailures, orDash(p.Status.Reason), orDash(OneLine(p.Status.LastError)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString("\n")
	if cs := app.Status.LastChangeSet; cs != nil {
		fmt.Fprintf(&b, "Last change set: %s, %s ago: %d created, %d configured, %d deleted\n",
			cs.Revision, Age(&cs.Time, now), cs.Created, cs.Configured, cs.Deleted)
		for _, e := range cs.Entries {
			fmt.Fprintf(&b, "  %-10s  %s\n", e.Action, e.Object)
		}
	} else {
		b.WriteString("Last change set: none yet\n")
	}
	b.WriteString("\n")
	if sync := app.Status.Sync; sync != nil {
		b.WriteString(SyncOf(sync))
		b.WriteString("\n")
	}
	if d := app.Status.Drift; d != nil && d.Count > 0 {
		fmt.Fprintf(&b, "Drift: %s drifted from Git (last detected %s ago)\n", Count(int(d.Count), "object"), Age(d.LastDetectedTime, now))
		for _, o := range d.Objects {
			fmt.Fprintf(&b, "  %s  %s  by %s\n", o.ObjectRef.String(), Printable(strings.Join(o.Fields, ", ")), Printable(strings.Join(o.Managers, ", ")))
		}
		if more := d.Unlisted(); more > 0 {
			fmt.Fprintf(&b, "  and %d more\n", more)
		}
	} else {
		b.WriteString("Drift: none\n")
	}
	episodes := eventsWith(events, plumbv1.ReasonDriftDetected, plumbv1.ReasonDriftConflict)
	if len(episodes) > 0 {
		b.WriteString("Drift episodes (from events):\n")
		for _, e := range episodes {
			fmt.Fprintf(&b, "  %s ago  %s  %s\n", Age(EventTime(e), now), Printable(e.Reason), OneLine(e.Message))
		}
	}
	b.WriteString("\n")
	if h := app.Status.Health; h != nil {
		fmt.Fprintf(&b, "Health: %d current, %d in progress, %d failed, %d terminating, %d not found, %d unknown\n",
			h.Current, h.InProgress, h.Failed, h.Terminating, h.NotFound, h.Unknown)
		for _, u := range h.Unhealthy {
			fmt.Fprintf(&b, "  %s  %s  %s\n", u.ObjectRef.String(), u.Status, OneLine(u.Message))
		}
		if more := h.Unlisted(); more > 0 {
			fmt.Fprintf(&b, "  and %d more\n", more)
		}
	} else {
		b.WriteString("Health: not assessed yet\n")
	}
	b.WriteString("\nEvents:\n")
	if len(events) == 0 {
		b.WriteString("  none\n")
	}
	for _, e := range events {
		fmt.Fprintf(&b, "  %s ago  %s  %s  %s\n", Age(EventTime(e), now), Printable(e.Type), Printable(e.Reason), OneLine(e.Message))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// SyncOf describes an ordered sync (status.sync): its revision, where it
// is or how it ended, and each hook it ran.
func SyncOf(sync *plumbv1.SyncStatus) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Ordered sync: %s, %s\n", sync.Revision, SyncPlace(sync))
	if sync.Message != "" {
		fmt.Fprintf(&b, "  %s\n", OneLine(sync.Message))
	}
	if sync.Failure != "" {
		fmt.Fprintf(&b, "  failed: %s\n", OneLine(sync.Failure))
	}
	for _, h := range sync.Hooks {
		line := fmt.Sprintf("  %-9s wave %-3d %-9s %s", h.Phase, h.Wave, h.Status, HookRef(h))
		if h.Message != "" {
			line += "  " + OneLine(h.Message)
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

// SyncPlace says where a sync is (its phase, and the wave under way) or
// how it ended.
func SyncPlace(sync *plumbv1.SyncStatus) string {
	if sync.Wave != nil && !sync.Done() {
		return fmt.Sprintf("%s, wave %d", sync.Phase, *sync.Wave)
	}
	return sync.Phase
}

// HookRef names a hook of a sync: Kind/namespace/name.
func HookRef(h plumbv1.HookStatus) string {
	if h.Namespace == "" {
		return h.Kind + "/" + Printable(h.Name)
	}
	return h.Kind + "/" + h.Namespace + "/" + Printable(h.Name)
}

// SortEvents orders events oldest first and keeps the newest n.
func SortEvents(events []corev1.Event, n int) []corev1.Event {
	sort.SliceStable(events, func(i, j int) bool { return EventTime(events[i]).Before(EventTime(events[j])) })
	if len(events) > n {
		events = events[len(events)-n:]
	}
	return events
}

func eventsWith(events []corev1.Event, reasons ...string) []corev1.Event {
	var out []corev1.Event
	for _, e := range events {
		for _, r := range reasons {
			if e.Reason == r {
				out = append(out, e)
			}
		}
	}
	return out
}

// EventTime is when an event last happened.
func EventTime(e corev1.Event) *metav1.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return &e.LastTimestamp
	case !e.EventTime.IsZero():
		t := metav1.NewTime(e.EventTime.Time)
		return &t
	}
	return &e.FirstTimestamp
}

// Count is "1 object", "2 objects".
func Count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// OneLine joins a message's lines, made Printable.
func OneLine(s string) string { return Printable(strings.Join(strings.Fields(s), " ")) }

// Printable is s with every control or format character but newline and
// tab (an escape sequence a terminal would obey, a bidirectional
// override: whoever can write an Event, a field or a file name could send
// one) shown escaped, as Go quotes it.
func Printable(s string) string {
	unsafe := func(r rune) bool {
		return r != '\n' && r != '\t' && (unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == utf8.RuneError)
	}
	if strings.IndexFunc(s, unsafe) < 0 {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if unsafe(r) {
			quoted := strconv.QuoteRuneToASCII(r)
			b.WriteString(quoted[1 : len(quoted)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
