package aggregate_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/aggregate"
	inv "github.com/oxbow-dev/oxbow/internal/fixtures/inventory"
)

// The command round trip, submit → outcome, through a Client and one
// exactly-once instance (the default 100 ms commit interval) on the broker
// kafkaenv picks (KAFKA_BROKERS for a real one): each command waits for the
// commit that records it. BenchmarkSubmit sends one at a time;
// BenchmarkSubmitConcurrent keeps 64 in flight. Both report p50 and p99
// latency and commands/s.
func BenchmarkSubmit(b *testing.B) { benchSubmit(b, 1) }

func BenchmarkSubmitConcurrent(b *testing.B) { benchSubmit(b, 64) }

func benchSubmit(b *testing.B, inFlight int) {
	_, c, _ := startInventory(b, 6)
	ctx := context.Background()
	// Warm up: every partition's task has run a command.
	for i := range 24 {
		if _, err := c.Submit(ctx, fmt.Sprintf("warm-%d", i), inv.ReceiveShipment{Quantity: 1}); err != nil {
			b.Fatal(err)
		}
	}
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
			o, err := c.Submit(ctx, fmt.Sprintf("shoe-%d", i%100), inv.ReceiveShipment{Quantity: 1, UnitCost: 100})
			lat[i] = time.Since(t0)
			if err != nil || o.Status != aggregate.Accepted {
				b.Errorf("command %d: %+v, %v", i, o, err)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "commands/s")
}
