package tree_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/plumb-dev/plumb/internal/source/tree"
	"github.com/plumb-dev/plumb/internal/testenv"
)

// An archive whose files are within every limit but that decompresses to
// far more (entries the tree skips) stops at the decompression budget,
// after reading not much past it: a bomb of 256 MiB of zeros.
func TestAnArchiveStopsAtItsDecompressionBudget(t *testing.T) {
	limits := tree.Limits{MaxFiles: 10, MaxTotalBytes: 1 << 20, MaxFileBytes: 1 << 20}
	small := map[string]string{"Chart.yaml": "name: web\n"}
	if _, err := tree.FromTarGzip(bytes.NewReader(testenv.TarGzPadded(t, small, 64<<10)), limits); err != nil {
		t.Fatalf("an archive within its budget: %v", err)
	}
	bomb := testenv.TarGzPadded(t, small, 256<<20)
	if len(bomb) > 1<<20 {
		t.Fatalf("the bomb is %d bytes compressed; want it small", len(bomb))
	}
	_, err := tree.FromTarGzip(bytes.NewReader(bomb), limits)
	if !errors.Is(err, tree.ErrDecompressionBudget) {
		t.Errorf("a bomb of skipped entries: %v, want ErrDecompressionBudget", err)
	}
}
