// Package health assesses the health of applied objects with kstatus
// (fluxcd/cli-utils pkg/kstatus), the conventions Flux waits on: each live
// object is Current, InProgress, Failed, Terminating, NotFound or Unknown,
// and an App's objects together are Healthy, Progressing or Failed. It
// works on what the informer cache already holds (the status is computed
// once, when the cache takes an object in) and makes no request.
package health

import (
	"fmt"
	"strings"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

// Status is an object's kstatus status, in one byte.
type Status uint8

// The statuses kstatus gives an object. The zero value is Unknown.
const (
	Unknown Status = iota
	Current
	InProgress
	Failed
	Terminating
	NotFound
)

// String is the status as kstatus spells it.
func (s Status) String() string {
	switch s {
	case Current:
		return string(status.CurrentStatus)
	case InProgress:
		return string(status.InProgressStatus)
	case Failed:
		return string(status.FailedStatus)
	case Terminating:
		return string(status.TerminatingStatus)
	case NotFound:
		return string(status.NotFoundStatus)
	}
	return string(status.UnknownStatus)
}

// Result is one object's health: its status and kstatus's message.
type Result struct {
	Status  Status
	Message string
}

// Of assesses a live object as the API server served it (u is not
// changed). Kinds without status conventions are Current; an object whose
// status cannot be read is Unknown, with the reason as its message.
func Of(u *unstructured.Unstructured) Result {
	res, err := status.Compute(u)
	if err != nil {
		return Result{Status: Unknown, Message: truncate(err.Error(), maxMessage)}
	}
	res.Message = truncate(res.Message, maxMessage) // an operator's message may be long: the cache keeps this much
	switch res.Status {
	case status.CurrentStatus:
		return Result{Status: Current, Message: res.Message}
	case status.InProgressStatus:
		return Result{Status: InProgress, Message: res.Message}
	case status.FailedStatus:
		return Result{Status: Failed, Message: res.Message}
	case status.TerminatingStatus:
		return Result{Status: Terminating, Message: res.Message}
	case status.NotFoundStatus:
		return Result{Status: NotFound, Message: res.Message}
	}
	return Result{Status: Unknown, Message: res.Message}
}

// Object is one of an App's objects with its health.
type Object struct {
	Ref    plumbv1.ObjectRef
	Result Result
}

// maxListed bounds how many unhealthy objects a summary names, and
// maxMessage the length of each message.
const (
	maxListed  = 20
	maxMessage = 256
)

// Summarize counts objects by status and names those that are not Current
// (Failed first, then in the order given), for the App's status.health.
// WaitingSince is left for the caller (see Since).
func Summarize(objects []Object) *plumbv1.HealthStatus {
	var s Summary
	for _, o := range objects {
		s.Add(o.Ref, o.Result)
	}
	return s.Status()
}

// Summary adds objects up one at a time, keeping only the few it will
// name: an App of thousands of healthy objects costs no copy of each.
type Summary struct {
	counts    plumbv1.HealthStatus
	failed    []Object // at most maxListed
	unhealthy []Object // not Failed, at most maxListed
}

// Add counts one object.
func (s *Summary) Add(ref plumbv1.ObjectRef, r Result) {
	switch r.Status {
	case Current:
		s.counts.Current++
		return
	case InProgress:
		s.counts.InProgress++
	case Failed:
		s.counts.Failed++
		if len(s.failed) < maxListed {
			s.failed = append(s.failed, Object{Ref: ref, Result: r})
		}
		return
	case Terminating:
		s.counts.Terminating++
	case NotFound:
		s.counts.NotFound++
	default:
		s.counts.Unknown++
	}
	if len(s.unhealthy) < maxListed {
		s.unhealthy = append(s.unhealthy, Object{Ref: ref, Result: r})
	}
}

// Status is the summary as status.health (without WaitingSince).
func (s *Summary) Status() *plumbv1.HealthStatus {
	out := s.counts
	out.Unhealthy = nil
	for _, o := range append(s.failed, s.unhealthy...)[:min(len(s.failed)+len(s.unhealthy), maxListed)] {
		out.Unhealthy = append(out.Unhealthy, plumbv1.UnhealthyObject{ObjectRef: o.Ref, Status: o.Result.Status.String(),
			Message: truncate(o.Result.Message, maxMessage)})
	}
	return &out
}

// Verdict is what the health of an App's objects means for the App.
type Verdict int

const (
	// Healthy: every object is Current.
	Healthy Verdict = iota
	// Progressing: some are not Current yet, none failed, and the health
	// timeout has not passed.
	Progressing
	// CheckFailed: an object failed, or some were still not Current when
	// the health timeout passed.
	CheckFailed
)

// Judge is the verdict on a summary whose wait began at s.WaitingSince,
// at now, with timeout; while Progressing, deadline is when it becomes
// CheckFailed. message names what is not healthy ("" when Healthy).
func Judge(s *plumbv1.HealthStatus, now time.Time, timeout time.Duration) (v Verdict, deadline time.Time, message string) {
	notCurrent := int32(s.NotCurrent())
	if notCurrent == 0 {
		return Healthy, time.Time{}, ""
	}
	names := describe(s)
	if s.Failed > 0 {
		return CheckFailed, time.Time{}, fmt.Sprintf("%d of %d objects failed: %s", s.Failed, notCurrent+s.Current, names)
	}
	since := now
	if s.WaitingSince != nil {
		since = s.WaitingSince.Time
	}
	deadline = since.Add(timeout)
	if !now.Before(deadline) {
		return CheckFailed, time.Time{}, fmt.Sprintf("%d of %d objects not healthy after %s: %s", notCurrent, notCurrent+s.Current, timeout, names)
	}
	return Progressing, deadline, fmt.Sprintf("waiting for %d of %d objects to become healthy (until %s): %s",
		notCurrent, notCurrent+s.Current, deadline.UTC().Format(time.RFC3339), names)
}

// Since is when the wait summarized by next began: previous's start while
// the objects stay unhealthy and no apply changed them (changed false),
// now when a wait begins — rounded up to the second, since the API server
// keeps times to the second, so that a wait read back from the App's
// status never ends before its timeout. It is nil when every object is
// Current.
func Since(previous, next *plumbv1.HealthStatus, changed bool, now time.Time) *metav1.Time {
	if next.NotCurrent() == 0 {
		return nil
	}
	if !changed && previous != nil && previous.WaitingSince != nil {
		return previous.WaitingSince
	}
	start := now.Truncate(time.Second)
	if start.Before(now) {
		start = start.Add(time.Second)
	}
	t := metav1.NewTime(start)
	return &t
}

// describe names the unhealthy objects of a summary.
func describe(s *plumbv1.HealthStatus) string {
	parts := make([]string, 0, len(s.Unhealthy)+1)
	for _, u := range s.Unhealthy {
		parts = append(parts, fmt.Sprintf("%s %s (%s)", u.ObjectRef.String(), u.Status, u.Message))
	}
	if more := s.Unlisted(); more > 0 {
		parts = append(parts, fmt.Sprintf("and %d more", more))
	}
	return strings.Join(parts, "; ")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n-3], "") + "..."
}
