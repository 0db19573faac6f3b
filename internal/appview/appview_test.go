package appview

import (
	"testing"

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
