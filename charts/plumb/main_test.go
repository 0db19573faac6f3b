// Package chart_test tests plumb's Helm chart: it lints and renders it with
// the Helm SDK for several value sets, dry-runs every rendered object on a
// local control plane, checks the schema's refusals, and installs,
// upgrades and uninstalls it, running plumb with the chart's own
// ServiceAccount and flags.
package chart_test

import (
	"testing"

	"github.com/plumb-dev/plumb/internal/source/git/gittest"
	"github.com/plumb-dev/plumb/internal/testenv"
)

var (
	cluster   *testenv.Cluster
	gitServer *gittest.Server
)

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.Needs{Cluster: testenv.ModeAPI, Git: true}, func(e *testenv.Env) { cluster, gitServer = e.Cluster, e.Git })
}
