// Package chart_test tests plumb's Helm chart: it lints and renders it with
// the Helm SDK for several value sets, dry-runs every rendered object on a
// local control plane, checks the schema's refusals, and installs,
// upgrades and uninstalls it, running plumb with the chart's own
// ServiceAccount and flags.
package chart_test

import (
	"os"
	"testing"

	"github.com/plumb-dev/plumb/internal/source/git/gittest"
	"github.com/plumb-dev/plumb/internal/testenv"
)

var (
	cluster   *testenv.Cluster
	gitServer *gittest.Server
)

func TestMain(m *testing.M) {
	os.Exit(gittest.RunTests(clusterRun{m}, func(s *gittest.Server) { gitServer = s }))
}

// clusterRun runs the tests with the package's local control plane.
type clusterRun struct{ m *testing.M }

func (r clusterRun) Run() int {
	return testenv.RunTests(r.m, testenv.Options{Mode: testenv.ModeAPI}, func(c *testenv.Cluster) { cluster = c })
}
