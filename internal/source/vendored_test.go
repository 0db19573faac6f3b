package source

import (
	"strings"
	"testing"

	"github.com/plumb-dev/plumb/internal/testenv"
)

// A vendored archive's chart name is read as Helm reads archives (the
// first folder's Chart.yaml, "./" too), and reading it is bounded: a
// Chart.yaml behind 8 MiB of other bytes is not looked for.
func TestAnArchivesChartNameIsReadWithinABudget(t *testing.T) {
	for name, tc := range map[string]struct {
		files map[string]string
		want  string
		found bool
	}{
		"helm package":        {map[string]string{"postgresql/Chart.yaml": "name: postgresql\n", "postgresql/values.yaml": ""}, "postgresql", true},
		"tar czf -C dir .":    {map[string]string{"./Chart.yaml": "name: redis\n", "./templates/a.yaml": ""}, "redis", true},
		"no Chart.yaml":       {map[string]string{"x/values.yaml": ""}, "", false},
		"a nested Chart.yaml": {map[string]string{"x/charts/y/Chart.yaml": "name: y\n"}, "", false},
		"behind 8 MiB":        {map[string]string{"x/0000.bin": strings.Repeat("\x00", 8<<20), "x/Chart.yaml": "name: late\n"}, "", false},
	} {
		got, found := archiveChartName(testenv.TarGz(t, tc.files))
		if got != tc.want || found != tc.found {
			t.Errorf("%s: %q, %v; want %q, %v", name, got, found, tc.want, tc.found)
		}
	}
	if _, found := archiveChartName([]byte("not gzip")); found {
		t.Error("a file that is no archive named a chart")
	}
}
