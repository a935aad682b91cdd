package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/oxbow-dev/oxbow/httpapi"
)

// Requests are traced, continuing the caller's trace.
func TestRequestTracing(t *testing.T) {
	in, reg := shop(t)
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	h, err := httpapi.New(httpapi.Config{Instance: in, Views: reg, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(h)
	defer s.Close()
	req, _ := http.NewRequest(http.MethodGet, s.URL+"/views/stock/keys/red", nil)
	req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	ended := spans.Ended()
	if len(ended) != 1 || ended[0].SpanContext().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || ended[0].Parent().SpanID().String() != "00f067aa0ba902b7" {
		t.Fatalf("spans %v", ended)
	}
	var status int64
	for _, kv := range ended[0].Attributes() {
		if kv.Key == "http.response.status_code" {
			status = kv.Value.AsInt64()
		}
	}
	if ended[0].Name() != "GET /views/stock/keys/red" || status != 200 {
		t.Errorf("span %s, status %d", ended[0].Name(), status)
	}
}
