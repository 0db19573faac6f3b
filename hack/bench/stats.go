package main

import (
	"math"
	"slices"
)

// Spread is a figure measured over repeated runs: the median, with the
// smallest and largest run beside it.
type Spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	Runs   int     `json:"runs"`
}

// spreadOf summarises the runs of one figure; with no runs every field is
// NaN, which the report prints as "n/a".
func spreadOf(runs []float64) Spread {
	if len(runs) == 0 {
		return Spread{Median: math.NaN(), Min: math.NaN(), Max: math.NaN()}
	}
	sorted := slices.Clone(runs)
	slices.Sort(sorted)
	return Spread{Median: percentile(sorted, 50), Min: sorted[0], Max: sorted[len(sorted)-1], Runs: len(sorted)}
}

// percentile is the p-th percentile (0–100) of sorted values, interpolated
// linearly between the two nearest ranks (the method of numpy's default and
// of Excel's PERCENTILE.INC), so the 50th of an even count is the mean of
// the middle two.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	rank := p / 100 * float64(len(sorted)-1)
	lo := int(math.Floor(rank))
	hi := int(math.Ceil(rank))
	if lo == hi {
		return sorted[lo]
	}
	return sorted[lo] + (rank-float64(lo))*(sorted[hi]-sorted[lo])
}

// percentileOf sorts a copy of values and takes its p-th percentile.
func percentileOf(values []float64, p float64) float64 {
	sorted := slices.Clone(values)
	slices.Sort(sorted)
	return percentile(sorted, p)
}
