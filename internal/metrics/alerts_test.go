package metrics

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	plumbv1 "github.com/plumb-dev/plumb/api/v1alpha1"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// The alert rules shipped with the chart, and their promtool tests.
var (
	rulesDir  = filepath.Join("..", "..", "charts", "plumb", "alerts")
	rulesFile = "plumb.rules.yaml"
	testsFile = "plumb.rules.test.yaml"
)

func promtool(t *testing.T) string {
	t.Helper()
	path, err := testenv.ToolPath("promtool")
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// runPromtool runs promtool in dir and returns its output and error.
func runPromtool(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestTheAlertRulesPassTheirPromtoolTests(t *testing.T) {
	if out, err := runPromtool(t, rulesDir, "check", "rules", rulesFile); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	if out, err := runPromtool(t, rulesDir, "test", "rules", testsFile); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

// Each mutation breaks one thing a rule must get right; the rule tests must
// catch every one of them, or they could not fail.
func TestTheRuleTestsCatchABrokenRule(t *testing.T) {
	rules, err := os.ReadFile(filepath.Join(rulesDir, rulesFile))
	if err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(filepath.Join(rulesDir, testsFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct{ name, from, to string }{
		{"stale after 2 intervals", "> 3 * max by", "> 2 * max by"},
		{"a suspended App counted as stale", "unless on (namespace, name) (max by (namespace, name) (plumb_app_suspended) == 1)", ""},
		{"one alert per replica", "max by (namespace, name, phase) (plumb_app_consecutive_failures)", "plumb_app_consecutive_failures"},
		{"a failing phase alerting at once", "        for: 10m\n        labels:\n          severity: warning\n        annotations:\n          summary: \"The {{ $labels.phase }}", "        labels:\n          severity: warning\n        annotations:\n          summary: \"The {{ $labels.phase }}"},
		{"drift under heal", `plumb_app_drifted_objects{drift_policy="alert"}`, "plumb_app_drifted_objects"},
		{"accepted webhooks counted as rejections", `code=~"4.."`, `code=~".*"`},
		{"one replica down is the controller down", `absent(up{job="plumb"} == 1)`, `up{job="plumb"} == 0`},
		{"the phase left out of the summary", "The {{ $labels.phase }} phase", "A phase"},
	} {
		t.Run(m.name, func(t *testing.T) {
			if !strings.Contains(string(rules), m.from) {
				t.Fatalf("the rules no longer contain %q: update the mutation", m.from)
			}
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, rulesFile), []byte(strings.Replace(string(rules), m.from, m.to, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, testsFile), tests, 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := runPromtool(t, dir, "test", "rules", testsFile)
			var exit *exec.ExitError
			if !errors.As(err, &exit) || !strings.Contains(out, "FAILED:") {
				t.Fatalf("the rule tests did not fail on an alert with the rule broken (%v):\n%s", err, out)
			}
		})
	}
}

// Every plumb_ series a rule reads is one the controller serves (a renamed
// metric would otherwise leave an alert that never fires).
func TestTheAlertRulesReadServedSeries(t *testing.T) {
	rules, err := os.ReadFile(filepath.Join(rulesDir, rulesFile))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.ServeWebhooks([]string{"github"})
	reg.MustRegister(NewAppCollector(func(context.Context) ([]plumbv1.App, error) {
		return []plumbv1.App{{}}, nil
	}, nil))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{}
	for _, f := range families {
		served[f.GetName()] = true
	}
	used := regexp.MustCompile(`plumb_[a-z_]+`).FindAllString(string(rules), -1)
	if len(used) == 0 {
		t.Fatal("no plumb_ series in the rules")
	}
	for _, name := range used {
		if !served[name] {
			t.Errorf("a rule reads %s, which the controller does not serve", name)
		}
	}
}
