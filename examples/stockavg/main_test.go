package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
	"github.com/oxbow-dev/oxbow/httpapi/httpapitest"
	"github.com/oxbow-dev/oxbow/internal/await"
)

// No goroutine a test started outlives the tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The example, in-process, fed known trades through its topic — some out
// of order, one too late for its moving-average windows but not for its
// day — and read through its HTTP API: exact averages, days and movers.
func TestStockAverages(t *testing.T) {
	env := kafkaenv.ForTest(t)
	name := fmt.Sprintf("stocks%d", time.Now().UnixNano()%1_000_000_000)
	cfg := config{Name: name, Addr: "127.0.0.1:0", Brokers: env.Brokers, StateDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)}
	ready := make(chan string, 1)
	cfg.Ready = func(url string) { ready <- url }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	var url string
	select {
	case url = <-ready:
	case err := <-done:
		t.Fatalf("stopped: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("not serving after 2 minutes")
	}

	// The web console is served (its pages are tried in a browser on the
	// shoe store).
	resp, err := http.Get(url + "/console/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(page), "console.js") {
		t.Errorf("GET /console/: %d %s", resp.StatusCode, page)
	}

	day := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	at := func(hms string) time.Time {
		d, err := time.Parse("15:04:05", hms)
		if err != nil {
			t.Fatal(err)
		}
		return day.Add(time.Duration(d.Hour())*time.Hour + time.Duration(d.Minute())*time.Minute + time.Duration(d.Second())*time.Second)
	}
	trades := []Trade{
		{"A", 100, 10, at("10:00:10")},
		{"A", 104, 10, at("10:02:10")}, // before the next one happened: out of order
		{"A", 102, 30, at("10:01:10")},
		{"B", 50, 100, at("10:00:20")},
		{"B", 45, 100, at("10:03:20")},
		{"C", 20, 1, at("10:00:30")},
		{"C", 21, 1, at("10:04:30")},
		{"A", 110, 10, at("10:10:00")},
		{"B", 46, 10, at("10:10:00")},
		{"C", 21, 1, at("10:10:00")},
		{"B", 1, 5, at("10:00:40")}, // late: its 5-minute windows closed at 10:05:30 at the latest
	}
	// D trades 12 times, at 1 to 12, for its count windows of 10 trades.
	for i := range 12 {
		trades = append(trades, Trade{"D", float64(i + 1), 1, at("10:20:00").Add(time.Duration(i) * time.Second)})
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...), kgo.DefaultProduceTopic(name+"-trades"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, tr := range trades {
		v, _ := json.Marshal(tr)
		if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte(tr.Ticker), Value: v}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	// The 5-minute averages of A starting at 10:00, 10:01 and 10:02.
	type window[V any] struct {
		Start time.Time `json:"start"`
		Value V         `json:"value"`
	}
	type windows[V any] struct {
		Windows []window[V] `json:"windows"`
	}
	var avgs windows[Average]
	awaitJSON(t, url+"/views/moving-average/keys/A/windows?from=2026-03-02T10:00:00Z&to=2026-03-02T10:02:00Z", &avgs, func() bool {
		return len(avgs.Windows) == 3 && avgs.Windows[0].Value.Trades == 3
	})
	want := []Average{
		{Trades: 3, Volume: 50, Mean: 102, VWAP: 102, SumPrice: 306, Notional: 5100},
		{Trades: 2, Volume: 40, Mean: 103, VWAP: 102.5, SumPrice: 206, Notional: 4100},
		{Trades: 1, Volume: 10, Mean: 104, VWAP: 104, SumPrice: 104, Notional: 1040},
	}
	for i, w := range avgs.Windows {
		if !w.Start.Equal(at("10:00:00").Add(time.Duration(i)*time.Minute)) || w.Value != want[i] {
			t.Errorf("A's window %d: %+v, want %+v from %s", i, w, want[i], at("10:00:00").Add(time.Duration(i)*time.Minute))
		}
	}
	// B's window at 10:00 leaves the late trade out.
	var bAvg windows[Average]
	awaitJSON(t, url+"/views/moving-average/keys/B/windows?from=2026-03-02T10:00:00Z&to=2026-03-02T10:00:00Z", &bAvg, func() bool { return len(bAvg.Windows) == 1 })
	if got := bAvg.Windows[0].Value; got.Trades != 2 || got.Mean != 47.5 || got.VWAP != 47.5 {
		t.Errorf("B's window at 10:00: %+v, want the two trades in time (mean 47.5)", got)
	}

	// Each ticker's day: the late trade counts there (B's low).
	wantDays := map[string]Day{
		"A": {Open: 100, OpenAt: at("10:00:10"), High: 110, Low: 100, Last: 110, LastAt: at("10:10:00"), Trades: 4, Volume: 60, ChangePc: 10},
		"B": {Open: 50, OpenAt: at("10:00:20"), High: 50, Low: 1, Last: 46, LastAt: at("10:10:00"), Trades: 4, Volume: 215, ChangePc: -8},
		"C": {Open: 20, OpenAt: at("10:00:30"), High: 21, Low: 20, Last: 21, LastAt: at("10:10:00"), Trades: 3, Volume: 3, ChangePc: 5},
	}
	for ticker, wd := range wantDays {
		var days windows[Day]
		awaitJSON(t, url+"/views/daily/keys/"+ticker+"/windows?from=2026-03-02T00:00:00Z&to=2026-03-02T00:00:00Z", &days, func() bool {
			return len(days.Windows) == 1 && days.Windows[0].Value.Trades == wd.Trades
		})
		if got := days.Windows[0].Value; !reflect.DeepEqual(normalize(got), normalize(wd)) {
			t.Errorf("%s's day: %+v, want %+v", ticker, got, wd)
		}
	}

	// The averages over trades, by count windows of 10 advancing by 5: D's
	// first full window, and the two filling; B's filling window has its
	// late trade (a count window takes trades in the order they arrive).
	type countWindows struct {
		Windows []struct {
			Start int64   `json:"start"`
			End   int64   `json:"end"`
			Value Average `json:"value"`
		} `json:"windows"`
	}
	var d countWindows
	awaitJSON(t, url+"/views/last-trades/keys/D/windows", &d, func() bool { return len(d.Windows) == 3 && d.Windows[2].Value.Trades == 2 })
	for i, w := range []Average{
		{Trades: 10, Volume: 10, Mean: 5.5, VWAP: 5.5, SumPrice: 55, Notional: 55},
		{Trades: 7, Volume: 7, Mean: 9, VWAP: 9, SumPrice: 63, Notional: 63},
		{Trades: 2, Volume: 2, Mean: 11.5, VWAP: 11.5, SumPrice: 23, Notional: 23},
	} {
		if got := d.Windows[i]; got.Start != int64(5*i) || got.End != int64(5*i+10) || got.Value != w {
			t.Errorf("D's count window %d: %+v, want trades %d-%d: %+v", i, got, 5*i, 5*i+9, w)
		}
	}
	var b countWindows
	awaitJSON(t, url+"/views/last-trades/keys/B/windows", &b, func() bool { return len(b.Windows) == 1 && b.Windows[0].Value.Trades == 4 })
	if got := b.Windows[0].Value; got.Mean != 35.5 || got.VWAP != 46.3488 {
		t.Errorf("B's trades: %+v, want the four, the late one too (mean 35.5, VWAP 46.3488)", got)
	}

	// The day's movers, ranked by the size of their change.
	var movers struct {
		Value []Mover `json:"value"`
	}
	awaitJSON(t, url+"/views/top-movers/keys/2026-03-02", &movers, func() bool { return len(movers.Value) == 4 && movers.Value[2].Last == 46 && movers.Value[0].Last == 12 })
	wantMovers := []Mover{{"D", 12, 1100}, {"A", 110, 10}, {"B", 46, -8}, {"C", 21, 5}}
	if !reflect.DeepEqual(movers.Value, wantMovers) {
		t.Errorf("top movers %+v, want %+v", movers.Value, wantMovers)
	}
	httpapitest.RequireFamilies(t, httpapitest.Metrics(t, url), "http_server_request_duration_seconds", "oxbow_process_latency_seconds", "oxbow_commit_latency_seconds")
}

func normalize(d Day) Day {
	d.OpenAt, d.LastAt = d.OpenAt.UTC(), d.LastAt.UTC()
	return d
}

// awaitJSON gets url into v until ok holds.
func awaitJSON(t *testing.T, url string, v any, ok func() bool) {
	t.Helper()
	await.NoError(t, 60*time.Second, "GET "+url, func() error {
		resp, err := http.Get(url)
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 && json.Unmarshal(b, v) == nil && ok() {
			return nil
		}
		return fmt.Errorf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
	})
}
