package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// MetricsOption tunes PrometheusMetrics.
type MetricsOption func(*metricsOptions)

type metricsOptions struct{ service, version string }

// Service names the service and its version in the metrics' resource
// (service.name and service.version, which Prometheus sees on
// target_info). $OTEL_SERVICE_NAME and $OTEL_RESOURCE_ATTRIBUTES say
// otherwise, as OpenTelemetry's SDKs do.
func Service(name, version string) MetricsOption {
	return func(o *metricsOptions) { o.service, o.version = name, version }
}

// PrometheusMetrics returns a MeterProvider for engine.Config.MeterProvider
// (the engine's instruments, and any of the application's) and a handler
// that serves what it records in Prometheus' text format, for
// Config.Metrics, with the Go runtime's (go_*: heap, goroutines, GC) and
// the process's (process_*: CPU, resident memory, open files). The
// resource (target_info) is the SDK's default, with the Service given,
// and the environment's. Shut the provider down when the instance stops.
func PrometheusMetrics(opts ...MetricsOption) (*sdkmetric.MeterProvider, http.Handler, error) {
	var o metricsOptions
	for _, opt := range opts {
		opt(&o)
	}
	res, err := metricsResource(o)
	if err != nil {
		return nil, nil, err
	}
	reg := prometheus.NewRegistry()
	if err := errors.Join(reg.Register(collectors.NewGoCollector()), reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))); err != nil {
		return nil, nil, fmt.Errorf("httpapi: the runtime's collectors: %w", err)
	}
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, nil, fmt.Errorf("httpapi: a Prometheus exporter: %w", err)
	}
	return sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithResource(res)), promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), nil
}

// metricsResource is the SDK's default resource, then o's service, then
// what the environment says, each over the one before.
func metricsResource(o metricsOptions) (*resource.Resource, error) {
	var attrs []attribute.KeyValue
	if o.service != "" {
		attrs = append(attrs, semconv.ServiceName(o.service))
	}
	if o.version != "" {
		attrs = append(attrs, semconv.ServiceVersion(o.version))
	}
	env, err := resource.New(context.Background(), resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("httpapi: the resource from $OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attrs...))
	if err == nil {
		res, err = resource.Merge(res, env)
	}
	if err != nil {
		return nil, fmt.Errorf("httpapi: the metrics' resource: %w", err)
	}
	return res, nil
}

// durationBuckets are the bucket bounds, in seconds, OpenTelemetry's
// semantic conventions advise for http.server.request.duration.
var durationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}

// instruments makes the API's instruments, if it has a MeterProvider.
func (a *api) instruments() error {
	if a.cfg.MeterProvider == nil {
		return nil
	}
	m := a.cfg.MeterProvider.Meter("github.com/oxbow-dev/oxbow/httpapi")
	var err1, err2 error
	a.requestDuration, err1 = m.Float64Histogram("http.server.request.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of HTTP server requests."), metric.WithExplicitBucketBoundaries(durationBuckets...))
	a.commandDuration, err2 = m.Float64Histogram("oxbow.command.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from a command's submission to its outcome, by aggregate and outcome (accepted, rejected, conflict, duplicate, or the error: malformed, reused-key, no-outcome, failed)."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("httpapi: instruments: %w", err)
	}
	return nil
}

// measure records each request's duration with its method, route (the
// pattern it matched, none if it matched no route) and status.
func (a *api) measure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, r)
		attrs := []attribute.KeyValue{
			attribute.String("http.request.method", r.Method),
			attribute.Int("http.response.status_code", sw.status),
		}
		if rc := chi.RouteContext(r.Context()); rc != nil {
			if p := rc.RoutePattern(); p != "" {
				attrs = append(attrs, attribute.String("http.route", p))
			}
		}
		if sw.status >= 500 {
			attrs = append(attrs, attribute.String("error.type", strconv.Itoa(sw.status)))
		}
		a.requestDuration.Record(context.WithoutCancel(r.Context()), time.Since(start).Seconds(), metric.WithAttributes(attrs...))
	})
}

// commandDone records a command's duration and outcome.
func (a *api) commandDone(ctx context.Context, aggregate, outcome string, start time.Time) {
	if a.commandDuration == nil {
		return
	}
	a.commandDuration.Record(context.WithoutCancel(ctx), time.Since(start).Seconds(),
		metric.WithAttributes(attribute.String("oxbow.aggregate", aggregate), attribute.String("oxbow.outcome", outcome)))
}
