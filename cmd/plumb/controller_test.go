package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.uber.org/zap"
	"k8s.io/client-go/rest"
)

// TestTheClientRateLimitFollowsTheServersFlowControl: by default plumb sets
// no client-side limit on an API server that applies API Priority and
// Fairness (the local kube-apiserver), the fallback limit on one that does
// not say so, and whatever the flags say when they say it.
func TestTheClientRateLimitFollowsTheServersFlowControl(t *testing.T) {
	ctx := context.Background()
	withoutFlowControl := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer withoutFlowControl.Close()
	for _, tc := range []struct {
		name    string
		server  *rest.Config
		qps     float32
		wantQPS float32
	}{
		{"a server with API Priority and Fairness", cluster.Config, 0, -1},
		{"a server without", &rest.Config{Host: withoutFlowControl.URL}, 0, fallbackQPS},
		{"an unreachable server", &rest.Config{Host: "http://127.0.0.1:1"}, 0, fallbackQPS},
		{"a limit set by flag", cluster.Config, 20, 20},
		{"no limit, by flag", &rest.Config{Host: withoutFlowControl.URL}, -5, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := rest.CopyConfig(tc.server)
			said := clientLimit(ctx, cfg, tc.qps, 42, zap.NewNop())
			if cfg.QPS != tc.wantQPS || cfg.Burst != 42 || said == "" {
				t.Errorf("QPS %v burst %d (%q), want QPS %v burst 42", cfg.QPS, cfg.Burst, said, tc.wantQPS)
			}
		})
	}
}
