package runtimelog

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestAnOutageLogsOneShortLinePerKindOfFailure(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	clock := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	log := New(zapr.NewLogger(zap.New(core)), 30*time.Second, clock.Now).WithName("runtime")
	event := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web.1873"}, Message: string(make([]byte, 900)),
		InvolvedObject: corev1.ObjectReference{Kind: "App", Name: "web"}, Reason: "Applied"}
	refused := errors.New("connection refused")
	for range 50 { // one failure after another while the API server is down
		log.Error(refused, "Unable to write event (may retry after sleeping)", "event", event)
		log.Error(refused, "Failed to watch", "reflector", "k8s.io/client-go/informers")
	}
	if got := logs.Len(); got != 2 {
		t.Fatalf("%d lines for 100 failures of 2 kinds, want 2", got)
	}
	for _, entry := range logs.All() {
		if v, ok := entry.ContextMap()["event"]; ok && v != "*v1.Event team/web.1873" {
			t.Errorf("the Event was logged as %q, want its kind and name", v)
		}
	}
	clock.Step(31 * time.Second)
	log.Error(refused, "Unable to write event (may retry after sleeping)", "event", event)
	last := logs.All()[logs.Len()-1]
	if logs.Len() != 3 || last.ContextMap()["suppressed"] != int64(49) {
		t.Errorf("after the interval: %d lines, the last with %v suppressed; want 3 lines and 49", logs.Len(), last.ContextMap()["suppressed"])
	}
}

func TestFailuresWithOneMessageAndDifferentCausesAreEachLogged(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	log := New(zapr.NewLogger(zap.New(core)), 30*time.Second, nil)
	for range 10 {
		log.Error(errors.New("watch of ConfigMaps: connection refused"), "Unhandled Error")
		log.Error(errors.New("the cache of Apps: forbidden"), "Unhandled Error")
	}
	if logs.Len() != 2 {
		t.Errorf("%d lines for two causes under one message, want 2", logs.Len())
	}
}

func TestPanicsAreLoggedEveryTimeWithTheirStack(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	log := New(zapr.NewLogger(zap.New(core)), 30*time.Second, nil)
	stack := strings.Repeat("goroutine 1 [running]:\n", 50)
	for range 3 {
		log.Error(errors.New("boom"), "Observed a panic", "stacktrace", stack)
	}
	if logs.Len() != 3 {
		t.Fatalf("%d lines for 3 panics, want 3", logs.Len())
	}
	if got := logs.All()[0].ContextMap()["stacktrace"]; got != stack {
		t.Errorf("the stack was cut to %d bytes", len(fmt.Sprint(got)))
	}
}

func TestALongErrorIsCut(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	log := New(zapr.NewLogger(zap.New(core)), 30*time.Second, nil)
	log.Error(errors.New(strings.Repeat("x", 5000)), "Unable to write event")
	if got := logs.All()[0].ContextMap()["error"]; len(fmt.Sprint(got)) > maxErrorLength+10 {
		t.Errorf("an error of %d bytes was logged", len(fmt.Sprint(got)))
	}
}

func TestTheCallerIsRuntimelogsCaller(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	log := New(zapr.NewLogger(zap.New(core, zap.AddCaller())), 30*time.Second, nil)
	log.Info("hello")
	if caller := logs.All()[0].Caller.File; !strings.HasSuffix(caller, "runtimelog_test.go") {
		t.Errorf("caller %s, want the test file", caller)
	}
}

func TestTheKindsOfErrorRememberedAreBounded(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	log := New(zapr.NewLogger(zap.New(core)), 30*time.Second, nil)
	for i := range 3 * maxKinds { // every error unique (it names an object), all within the interval
		log.Error(fmt.Errorf("events %q is forbidden", fmt.Sprint("x.", i)), "Server rejected event")
	}
	if logs.Len() > maxKinds+1 {
		t.Errorf("%d lines for %d unique errors within the interval, want at most %d", logs.Len(), 3*maxKinds, maxKinds+1)
	}
}
