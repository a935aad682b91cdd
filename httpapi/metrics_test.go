package httpapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/oxbow-dev/oxbow/aggregate"
	"github.com/oxbow-dev/oxbow/httpapi"
	"github.com/oxbow-dev/oxbow/httpapi/httpapitest"
)

// /metrics serves what the meter provider records, in Prometheus' format.
func TestPrometheusMetrics(t *testing.T) {
	in, reg := shop(t)
	mp, metrics, err := httpapi.PrometheusMetrics()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = mp.Shutdown(context.Background()) }()
	c, err := mp.Meter("test").Int64Counter("oxbow.test.requests")
	if err != nil {
		t.Fatal(err)
	}
	c.Add(context.Background(), 3)
	h, err := httpapi.New(httpapi.Config{Instance: in, Views: reg, Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(h)
	defer s.Close()
	status, _, body := get(t, s, "/metrics")
	if status != 200 || !strings.Contains(body, "oxbow_test_requests_total") || !strings.Contains(body, " 3") {
		t.Errorf("/metrics: %d %s", status, body)
	}
	// The runtime's and the process's, for a soak or a dashboard.
	for _, name := range []string{"go_goroutines ", "go_memstats_heap_inuse_bytes ", "process_resident_memory_bytes ", "process_open_fds "} {
		if !strings.Contains(body, "\n"+name) {
			t.Errorf("/metrics has no %s", name)
		}
	}
}

// The service and its version are the metrics' resource, on target_info;
// $OTEL_SERVICE_NAME says otherwise, as OpenTelemetry's SDKs do.
func TestMetricsService(t *testing.T) {
	for _, c := range []struct{ env, want string }{{"", "shop"}, {"shop-eu", "shop-eu"}} {
		t.Setenv("OTEL_SERVICE_NAME", c.env)
		t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=test")
		mp, metrics, err := httpapi.PrometheusMetrics(httpapi.Service("shop", "v2"))
		if err != nil {
			t.Fatal(err)
		}
		c2, err := mp.Meter("test").Int64Counter("oxbow.test.requests")
		if err != nil {
			t.Fatal(err)
		}
		c2.Add(context.Background(), 1)
		rec := httptest.NewRecorder()
		metrics.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		var info string
		for _, line := range strings.Split(rec.Body.String(), "\n") {
			if strings.HasPrefix(line, "target_info{") {
				info = line
			}
		}
		for _, l := range []string{`service_name="` + c.want + `"`, `service_version="v2"`, `deployment_environment_name="test"`, `telemetry_sdk_language="go"`} {
			if !strings.Contains(info, l) {
				t.Errorf("OTEL_SERVICE_NAME %q: target_info %q has no %s", c.env, info, l)
			}
		}
		_ = mp.Shutdown(context.Background())
	}
}

// accepting is a Submitter that accepts every command but "bad".
type accepting struct{}

func (accepting) SubmitJSON(_ context.Context, id string, _ []byte, _ ...aggregate.SubmitOption) (aggregate.Outcome, error) {
	if id == "bad" {
		return aggregate.Outcome{AggregateID: id, Status: aggregate.Rejected, Rejection: &aggregate.Rejection{Code: "no", Message: "no"}}, nil
	}
	return aggregate.Outcome{AggregateID: id, Status: aggregate.Accepted, Version: 1}, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// Requests are measured in seconds, with the semantic conventions' bucket
// bounds, by method, route pattern and status; commands by aggregate and
// outcome.
func TestRequestMetrics(t *testing.T) {
	in, reg := shop(t)
	meters, metrics, err := httpapi.PrometheusMetrics()
	if err != nil {
		t.Fatal(err)
	}
	defer meters.Shutdown(context.Background())
	h, err := httpapi.New(httpapi.Config{Instance: in, Views: reg, Metrics: metrics, MeterProvider: meters, Commands: map[string]httpapi.Submitter{"inventory": accepting{}}})
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(h)
	defer s.Close()
	for range 3 {
		get(t, s, "/views/stock/keys/red")
	}
	get(t, s, "/views/nope")
	for _, id := range []string{"red", "red", "bad"} {
		resp, err := http.Post(s.URL+"/aggregates/inventory/"+id+"/commands", "application/json", strings.NewReader(`{"type":"X","data":{}}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	fams := httpapitest.Metrics(t, s.URL)

	req := fams["http_server_request_duration_seconds"]
	if req == nil || req.GetType() != dto.MetricType_HISTOGRAM {
		t.Fatalf("no http_server_request_duration_seconds histogram: %v", slices.Sorted(func(yield func(string) bool) {
			for k := range fams {
				if !yield(k) {
					return
				}
			}
		}))
	}
	counts := map[string]uint64{}
	for _, m := range req.GetMetric() {
		counts[label(m, "http_request_method")+" "+label(m, "http_route")+" "+label(m, "http_response_status_code")] += m.GetHistogram().GetSampleCount()
		var bounds []float64
		for _, b := range m.GetHistogram().GetBucket() {
			bounds = append(bounds, b.GetUpperBound())
		}
		if !slices.Contains(bounds, 0.005) || !slices.Contains(bounds, 10) || slices.Contains(bounds, 1000) {
			t.Errorf("bucket bounds %v: want seconds (0.005 to 10)", bounds)
		}
	}
	for key, want := range map[string]uint64{
		"GET /views/{view}/keys/{key} 200":               3,
		"GET /views/{view} 404":                          1,
		"POST /aggregates/{aggregate}/{id}/commands 200": 2,
		"POST /aggregates/{aggregate}/{id}/commands 422": 1,
	} {
		if counts[key] != want {
			t.Errorf("requests %q: %d, want %d (all: %v)", key, counts[key], want, counts)
		}
	}
	cmds := map[string]uint64{}
	for _, m := range fams["oxbow_command_duration_seconds"].GetMetric() {
		cmds[label(m, "oxbow_aggregate")+" "+label(m, "oxbow_outcome")] += m.GetHistogram().GetSampleCount()
	}
	if cmds["inventory accepted"] != 2 || cmds["inventory rejected"] != 1 {
		t.Errorf("commands by outcome: %v, want 2 accepted and 1 rejected", cmds)
	}
}
