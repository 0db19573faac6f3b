package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/rest"
)

// families parses the Prometheus text format.
func families(in io.Reader) (map[string]*dto.MetricFamily, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(in)
}

// sumWhere adds up the values of a counter or gauge family's series (the
// sums of the observations, for a histogram) whose labels keep accepts
// (nil accepts all); a family that is absent sums to 0.
func sumWhere(fams map[string]*dto.MetricFamily, name string, keep func(labels map[string]string) bool) float64 {
	fam, ok := fams[name]
	if !ok {
		return 0
	}
	total := 0.0
	for _, m := range fam.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if keep != nil && !keep(labels) {
			continue
		}
		switch {
		case m.Counter != nil:
			total += m.GetCounter().GetValue()
		case m.Gauge != nil:
			total += m.GetGauge().GetValue()
		case m.Untyped != nil:
			total += m.GetUntyped().GetValue()
		case m.Histogram != nil:
			total += m.GetHistogram().GetSampleSum()
		}
	}
	return total
}

// scrapeURL reads a metrics endpoint over plain HTTP.
func scrapeURL(ctx context.Context, url string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scraping %s: %s", url, resp.Status)
	}
	return families(resp.Body)
}

// scrapeAPIServer reads kube-apiserver's own /metrics with cfg's rights.
func scrapeAPIServer(ctx context.Context, cfg *rest.Config) (map[string]*dto.MetricFamily, error) {
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(cfg.Host, "/")+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping kube-apiserver: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scraping kube-apiserver: %s", resp.Status)
	}
	return families(resp.Body)
}

// objectRequests is the server's count of requests about the given
// resources (e.g. "configmaps"), watches left out (a watch is opened once,
// not per tick): apiserver_request_total, which the bench compares with what
// clients counted.
func objectRequests(fams map[string]*dto.MetricFamily, resources ...string) float64 {
	return sumWhere(fams, "apiserver_request_total", func(l map[string]string) bool {
		if l["verb"] == "WATCH" {
			return false
		}
		for _, r := range resources {
			if l["resource"] == r {
				return true
			}
		}
		return false
	})
}

// objectWrites is the server's count of writes (create, update, patch,
// apply, delete — dry runs left out) of the given resources.
func objectWrites(fams map[string]*dto.MetricFamily, resources ...string) float64 {
	return sumWhere(fams, "apiserver_request_total", func(l map[string]string) bool {
		switch l["verb"] {
		case "POST", "PUT", "PATCH", "APPLY", "DELETE":
		default:
			return false
		}
		if l["dry_run"] != "" {
			return false
		}
		for _, r := range resources {
			if l["resource"] == r {
				return true
			}
		}
		return false
	})
}
