package httpapi_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/httpapi"
	"github.com/oxbow-dev/oxbow/projection"
)

const (
	benchServerEnv = "OXBOW_HTTP_BENCH_SERVER"
	benchKeys      = 10000
)

// TestBenchServer is BenchmarkPointReads' server process: an instance (on
// the broker kafkaenv picks: KAFKA_BROKERS, or an embedded one) with a
// table of benchKeys keys, served over HTTP on loopback. It prints "READY
// <url>" and serves until SIGTERM. It does nothing in a normal test run.
func TestBenchServer(t *testing.T) {
	if os.Getenv(benchServerEnv) == "" {
		t.Skip("BenchmarkPointReads' server process")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	env, topic, top, cl := kvTable(t, "http-bench", 6)
	recs := make([]*kgo.Record, benchKeys)
	for i := range recs {
		v, _ := serde.Int64.Encode(int64(i))
		recs[i] = &kgo.Record{Key: fmt.Appendf(nil, "k%05d", i), Value: v}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	a := enginetest.StartApp(t, top, engine.Config{AppID: topic, Brokers: env.Brokers})
	view, _ := projection.NewKeyValue("kv", "kv", serde.String, serde.Int64)
	views, _ := projection.NewRegistry(view)
	h, err := httpapi.New(httpapi.Config{Instance: a, Views: views})
	if err != nil {
		t.Fatal(err)
	}
	// Every key readable before the benchmark starts.
	for {
		st, err := engine.QueryKeyValueStore(a, "kv", serde.String, serde.Int64)
		if err == nil {
			n := 0
			for _, err := range st.All() {
				if err == nil {
					n++
				}
			}
			if n == benchKeys {
				break
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	fmt.Println("READY http://" + ln.Addr().String())
	<-ctx.Done()
	_ = srv.Close()
}

// BenchmarkPointReads: point reads of a view over HTTP, from this process
// to a server in another (TestBenchServer), on loopback, 32 requests in
// flight over keep-alive connections: requests/s, p50 and p99 latency.
func BenchmarkPointReads(b *testing.B) {
	cmd := exec.Command(os.Args[0], "-test.run", "^TestBenchServer$", "-test.v")
	cmd.Env = append(os.Environ(), benchServerEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	sc := bufio.NewScanner(out)
	base := ""
	for sc.Scan() {
		if u, ok := strings.CutPrefix(sc.Text(), "READY "); ok {
			base = u
			break
		}
	}
	if base == "" {
		b.Fatal("the server process did not get ready")
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	const inFlight = 32
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: inFlight}}
	lat := make([]time.Duration, b.N)
	var wg sync.WaitGroup
	sem := make(chan struct{}, inFlight)
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			t0 := time.Now()
			resp, err := client.Get(fmt.Sprintf("%s/views/kv/keys/k%05d", base, i%benchKeys))
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			lat[i] = time.Since(t0)
			if resp.StatusCode != 200 {
				b.Errorf("status %d", resp.StatusCode)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "requests/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}
