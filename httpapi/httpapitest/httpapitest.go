// Package httpapitest helps test services built on httpapi.
package httpapitest

import (
	"net/http"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics reads a service's /metrics (base is its URL) with Prometheus'
// own text parser, failing the test unless it answers 200 with text that
// parses. The families are keyed by their Prometheus names
// ("http_server_request_duration_seconds").
func Metrics(tb testing.TB, base string) map[string]*dto.MetricFamily {
	tb.Helper()
	req, err := http.NewRequest(http.MethodGet, base+"/metrics", nil)
	if err != nil {
		tb.Fatal(err)
	}
	return MetricsOf(tb, req)
}

// MetricsOf is Metrics through a request of the caller's: one with
// credentials, for an API with an Authenticator.
func MetricsOf(tb testing.TB, req *http.Request) map[string]*dto.MetricFamily {
	tb.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("GET %s: %s", req.URL, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		tb.Fatalf("%s does not parse: %v", req.URL, err)
	}
	return fams
}

// RequireFamilies fails the test unless each family named is in fams with
// at least one series.
func RequireFamilies(tb testing.TB, fams map[string]*dto.MetricFamily, names ...string) {
	tb.Helper()
	for _, n := range names {
		if f := fams[n]; f == nil || len(f.GetMetric()) == 0 {
			tb.Errorf("/metrics has no %s", n)
		}
	}
}
