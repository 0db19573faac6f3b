package appview

import (
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
)

func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"plain text, → unicode":   "plain text, → unicode",
		"two\nlines\tand a tab":   "two\nlines\tand a tab",
		"\x1b]52;c;ZXZpbA==\x07!": `\x1b]52;c;ZXZpbA==\a!`,
		"right\u202eto left":      `right\u202eto left`,
		"bad \xff byte":           `bad \ufffd byte`,
	} {
		if got := Printable(in); got != want {
			t.Errorf("Printable(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSourceOfNamesEachSourceKind(t *testing.T) {
	for _, tc := range []struct {
		source plumbv1.Source
		want   string
	}{
		{plumbv1.Source{URL: "https://github.com/org/repo", Ref: plumbv1.GitRef{Branch: "main"}, Path: "deploy"},
			"https://github.com/org/repo branch main deploy"},
		{plumbv1.Source{OCI: &plumbv1.OCISource{URL: "oci://ghcr.io/org/app", Ref: plumbv1.OCIRef{SemVer: "^1"}}},
			"oci://ghcr.io/org/app semver ^1 ."},
		{plumbv1.Source{Helm: &plumbv1.HelmSource{Repository: "https://charts.example.com", Chart: "web", Version: ">=1.2 <2"}},
			"https://charts.example.com chart web version >=1.2 <2"},
		{plumbv1.Source{Helm: &plumbv1.HelmSource{Repository: "oci://ghcr.io/org/charts", Chart: "web"}},
			"oci://ghcr.io/org/charts chart web latest version"},
		{plumbv1.Source{Bucket: &plumbv1.BucketSource{Endpoint: "minio:9000", Bucket: "deploy", Prefix: "prod/"}, Path: "web"},
			"minio:9000 bucket deploy prefix prod web"},
		{plumbv1.Source{Bucket: &plumbv1.BucketSource{Endpoint: "s3.amazonaws.com", Bucket: "deploy"}},
			"s3.amazonaws.com bucket deploy prefix (all) ."},
	} {
		if got := SourceOf(&plumbv1.App{Spec: plumbv1.AppSpec{Source: tc.source}}); got != tc.want {
			t.Errorf("SourceOf = %q, want %q", got, tc.want)
		}
	}
}

// The detail shows whether a verified source's revision verified, and
// says nothing of it for a source that asks for no verification.
func TestDetailShowsTheSourcesVerification(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	app := &plumbv1.App{Spec: plumbv1.AppSpec{Source: plumbv1.Source{Helm: &plumbv1.HelmSource{Repository: "https://charts.example.com", Chart: "web",
		Verify: &plumbv1.OCIVerification{Provider: plumbv1.VerifyProviderHelm, SecretRef: plumbv1.LocalObjectReference{Name: "keys"}}}}}}
	app.Status.Conditions = []metav1.Condition{{Type: plumbv1.ConditionSourceVerified, Status: metav1.ConditionFalse,
		Reason: plumbv1.ReasonVerificationFailed, Message: "version 1.1.0 has no provenance file", LastTransitionTime: metav1.NewTime(now.Add(-time.Minute))}}
	var b strings.Builder
	if err := Detail(&b, app, nil, now); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^SourceVerified +False +VerificationFailed +60s +version 1.1.0 has no provenance file$`).MatchString(b.String()) {
		t.Errorf("the detail lacks the SourceVerified row:\n%s", b.String())
	}
	app.Status.Conditions = nil
	b.Reset()
	if err := Detail(&b, app, nil, now); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "SourceVerified") {
		t.Errorf("a detail without the condition names it:\n%s", b.String())
	}
}

// The detail shows the last ordered sync: where it is, what failed it,
// and each hook's outcome.
func TestDetailShowsTheOrderedSync(t *testing.T) {
	wave := int32(2)
	app := &plumbv1.App{Status: plumbv1.AppStatus{Sync: &plumbv1.SyncStatus{Revision: "main@sha1:" + strings.Repeat("a", 40), Phase: plumbv1.SyncPhaseSyncFail, Wave: &wave,
		Message: "SyncFail hook Job/shop/page is running", Failure: "PreSync hook Job/shop/migrate failed: the Job failed: BackoffLimitExceeded",
		Hooks: []plumbv1.HookStatus{
			{ObjectRef: plumbv1.ObjectRef{Kind: "Job", Namespace: "shop", Name: "migrate"}, Phase: "PreSync", Status: plumbv1.HookFailed, Message: "the Job failed: BackoffLimitExceeded"},
			{ObjectRef: plumbv1.ObjectRef{Kind: "Job", Namespace: "shop", Name: "page-x2v9"}, Phase: "SyncFail", Wave: 2, Status: plumbv1.HookRunning},
		}}}}
	var b strings.Builder
	if err := Detail(&b, app, nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Ordered sync: main@sha1:" + strings.Repeat("a", 40) + ", SyncFail, wave 2",
		"failed: PreSync hook Job/shop/migrate failed",
		"PreSync   wave 0   Failed    Job/shop/migrate  the Job failed: BackoffLimitExceeded",
		"SyncFail  wave 2   Running   Job/shop/page-x2v9",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the detail lacks %q:\n%s", want, b.String())
		}
	}
}
