package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
)

// baselineNames are the baselines' columns, in order.
var baselineNames = []string{"flux_style", "argo_style", "naive"}

// result is one figure of one scenario: plumb's, and each baseline's where
// the baseline does the same job.
type result struct {
	// Key names the figure in the JSON line.
	Key string
	// Plumb is plumb's figure; Baselines the others', by name.
	Plumb     Spread
	Baselines map[string]Spread
	// Goal says what plumb must reach ("≤ 0.01"); Met decides it. A
	// figure without a goal of its own has neither.
	Goal string
	Met  func(median float64) bool
	// Note is what the reader needs to know to trust the figure.
	Note string
}

// goalAtMost and goalAtLeast build the two kinds of goal.
func goalAtMost(limit float64) (string, func(float64) bool) {
	return "≤ " + formatNumber(limit), func(v float64) bool { return !math.IsNaN(v) && v <= limit }
}

func goalAtLeast(limit float64) (string, func(float64) bool) {
	return "≥ " + formatNumber(limit), func(v float64) bool { return !math.IsNaN(v) && v >= limit }
}

// formatNumber prints a figure briefly: integers whole, others with three
// significant digits.
func formatNumber(v float64) string {
	switch {
	case math.IsNaN(v):
		return "n/a"
	case v == math.Trunc(v) && math.Abs(v) < 1e12:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

// formatSpread prints a median with the runs' range beside it.
func formatSpread(s Spread) string {
	if s.Runs == 0 {
		return "n/a"
	}
	if s.Runs == 1 || s.Min == s.Max {
		return formatNumber(s.Median)
	}
	return fmt.Sprintf("%s (%s–%s)", formatNumber(s.Median), formatNumber(s.Min), formatNumber(s.Max))
}

// ratio compares plumb with the first baseline that measured the figure:
// plumb's median over the baseline's.
func ratio(r result) string {
	for _, name := range baselineNames {
		b, ok := r.Baselines[name]
		if !ok || b.Runs == 0 {
			continue
		}
		if b.Median == 0 {
			if r.Plumb.Median == 0 {
				return fmt.Sprintf("1 (vs %s)", name)
			}
			return fmt.Sprintf("n/a (%s is 0)", name)
		}
		return fmt.Sprintf("%s (vs %s)", formatNumber(r.Plumb.Median/b.Median), name)
	}
	return "n/a"
}

// writeTable prints the results as a markdown table, then each result's
// note.
func writeTable(out io.Writer, results []result) {
	header := append(append([]string{"scenario", "plumb"}, baselineNames...), "ratio", "goal", "met")
	fmt.Fprintf(out, "| %s |\n|%s\n", strings.Join(header, " | "), strings.Repeat("---|", len(header)))
	for _, r := range results {
		row := []string{"`" + r.Key + "`", formatSpread(r.Plumb)}
		for _, name := range baselineNames {
			row = append(row, formatSpread(r.Baselines[name]))
		}
		goal, met := "none", "n/a"
		if r.Met != nil {
			goal, met = r.Goal, "no"
			if r.Met(r.Plumb.Median) {
				met = "yes"
			}
		}
		row = append(row, ratio(r), goal, met)
		fmt.Fprintf(out, "| %s |\n", strings.Join(row, " | "))
	}
	fmt.Fprintln(out)
	for _, r := range results {
		if r.Note != "" {
			fmt.Fprintf(out, "- `%s`: %s\n", r.Key, r.Note)
		}
	}
}

// writeJSON prints one JSON object on one line: each figure's key and
// plumb's median (null where it could not be measured).
func writeJSON(out io.Writer, results []result) error {
	figures := map[string]*float64{}
	for _, r := range results {
		if math.IsNaN(r.Plumb.Median) {
			figures[r.Key] = nil
			continue
		}
		v := r.Plumb.Median
		figures[r.Key] = &v
	}
	line, err := json.Marshal(figures)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(out, string(line))
	return err
}
