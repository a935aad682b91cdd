package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The soak (-soak DURATION): the shoe store (examples/shoestore, built and
// run as its own process, its views' store only) on real Kafka and
// PostgreSQL under steady load for the duration: commands at -soak-rate a
// second on -soak-shoes shoes (shipments, sales, returns), as many point
// reads of its views, a client on the inventory's change feed, and a
// price changed in the catalog table every second, captured by the
// store's CDC source into its catalog view. Every -soak-every it samples
// the store's resident memory, Go heap, goroutines, open files and the
// disk its state takes; after -soak-warmup each series is fitted with a
// line, and it must be flat: over the measured window the line moves by
// no more than the larger of three standard deviations of the samples
// around it (the noise: a heap's saw, a memtable filling and flushing)
// and 5% of the series' mean. At the end the load stops and the views
// must agree with what was done: each shoe's stock, sales and returns the
// sums of the accepted commands, each price the last written. Nothing may
// fail on the way: no command or read without an answer, no feed lost.
// The samples, the fits and the plots go to -soak-dir.
//
// What it starts it stops, on Ctrl-C too, and it removes what it made: its
// rows of the catalog, the replication slot, its topics and groups.

// soakSettings are the soak's flags.
type soakSettings struct {
	duration, warmup, every time.Duration
	// retention is the store's -outcome-retention: outcomes older than
	// it are deleted, so the tables stop growing once it has passed.
	retention time.Duration
	// budget is the store's -memory-budget (0: none).
	budget int64
	// cache is the store's -cache-bytes (0: the engine's default). Each
	// command leaves an outcome, kept for retention under a key of its
	// own, so the record cache fills with them up to its bound: at 25
	// commands a second, the default 10 MiB takes longer than a short
	// soak, whose heap would then still be growing towards it.
	cache int64
	rate  float64
	shoes int
	dir   string
}

// soakSample is one sample of the store's process.
type soakSample struct {
	At       float64 // seconds since the load began
	Values   map[string]float64
	Commands int64 // answered since the last sample
	CmdP99ms float64
	Reads    int64
	Feed     int64 // change events received since the last sample
}

// soakSeries are the sampled series, in the order they are reported. Each
// must be flat after the warm-up but the write-ahead logs, which must stay
// under their bound (bound names the sampled series that holds it).
//
// The resident memory itself is the sum of two: pebble's memtables and
// block cache, which fill towards their configured sizes (a store's
// memtables start at 256 KiB and double at each rotation, so at the soak's
// rate they grow for tens of minutes before the first flush), held to their
// bound; and the rest, which must be flat. The RSS is shown, its line
// fitted, and judged by those two. pebble reports what it has allocated,
// and a memtable's pages become resident only as it fills (pebble keeps the
// last flushed one to recycle), so the rest rises with the first fill of
// each memtable at its full size: with the default 16 MiB memtables, past
// the hour at 50 commands a second; with -soak-budget's 4 MiB, within the
// warm-up.
var soakSeries = []struct{ name, label, unit, bound string }{
	{"rss_mb", "resident memory", "MiB", "-"},
	{"rss_apart_mb", "resident memory apart from the state store's", "MiB", ""},
	{"state_memory_mb", "the state store's memtables and block cache", "MiB", "state_memory_bound_mb"},
	{"heap_mb", "Go heap in use", "MiB", ""},
	{"goroutines", "goroutines", "", ""},
	{"open_fds", "open files", "", ""},
	{"state_tables_mb", "state on disk: tables", "MiB", ""},
	{"state_wal_mb", "state on disk: write-ahead logs", "MiB", "state_wal_bound_mb"},
}

// soakLoad is what the load did and saw, counted as it goes.
type soakLoad struct {
	mu       sync.Mutex
	expected map[string]*shoeState // by shoe: the sums of accepted commands
	prices   map[string]int64      // by shoe: the last price written
	cmdLat   []time.Duration       // since the last sample

	commands, accepted, rejected, retried atomic.Int64
	reads, feedEvents, feedReconnects     atomic.Int64
	priceChanges, skipped, pgReconnects   atomic.Int64
	errs                                  []string
	errCount                              atomic.Int64
}

type shoeState struct {
	InStock  int `json:"inStock"`
	Sold     int `json:"sold"`
	Returned int `json:"returned"`
}

func (l *soakLoad) fail(format string, args ...any) {
	l.errCount.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.errs) < 20 {
		l.errs = append(l.errs, fmt.Sprintf(format, args...))
	}
}

// soak runs the soak. It needs real Kafka (c.brokers) and PostgreSQL
// (OXBOW_PG_DSN).
func soak(ctx context.Context, c benchConfig, ss soakSettings) error {
	dsn := os.Getenv("OXBOW_PG_DSN")
	if dsn == "" {
		return errors.New("-soak needs PostgreSQL for the catalog's change data capture: scripts/services.sh start && eval \"$(scripts/services.sh env)\" (sets OXBOW_PG_DSN and KAFKA_BROKERS)")
	}
	tmp, err := os.MkdirTemp("", "oxbow-soak-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "soak: "+format, args...)
	}
	logf("building the shoe store\n")
	bin := filepath.Join(tmp, "shoestore")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./examples/shoestore")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building examples/shoestore: %v\n%s", err, out)
	}
	name := fmt.Sprintf("soak%d", time.Now().UnixNano()%1e8)
	shoes := make([]string, ss.shoes)
	for i := range shoes {
		shoes[i] = fmt.Sprintf("%s-%02d", name, i)
	}
	pg, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("the catalog database: %w", err)
	}
	defer pg.Close(context.WithoutCancel(ctx))
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	// Made before the store starts: the store creates the table if it is
	// missing, and its capture's snapshot reads these rows.
	if _, err := pg.Exec(ctx, `CREATE TABLE IF NOT EXISTS catalog (model text PRIMARY KEY, name text NOT NULL, price_cents bigint NOT NULL)`); err != nil {
		return fmt.Errorf("the catalog table: %w", err)
	}
	load := &soakLoad{expected: map[string]*shoeState{}, prices: map[string]int64{}}
	for i, s := range shoes {
		load.expected[s], load.prices[s] = &shoeState{}, int64(5000+100*i)
		if _, err := pg.Exec(ctx, `INSERT INTO catalog VALUES ($1, $2, $3) ON CONFLICT (model) DO UPDATE SET price_cents = EXCLUDED.price_cents`,
			s, "Soak shoe "+strconv.Itoa(i), load.prices[s]); err != nil {
			return fmt.Errorf("the catalog's rows: %w", err)
		}
	}
	defer soakCleanup(context.WithoutCancel(ctx), dsn, adm, name, logf)

	addr, err := freeAddr()
	if err != nil {
		return err
	}
	stateDir := filepath.Join(tmp, "state")
	// Unpinned (a nil pinning): the store's process, SIGTERM when ctx
	// ends, killed if the harness dies.
	var unpinned *pinning
	cmd := unpinned.command(ctx, os.Environ(), bin, "-name", name, "-addr", addr, "-brokers", strings.Join(c.brokers, ","), "-pg", dsn,
		"-state-dir", stateDir, "-services", "store", "-outcome-retention", ss.retention.String(),
		"-memory-budget", strconv.FormatInt(ss.budget, 10), "-cache-bytes", strconv.FormatInt(ss.cache, 10))
	store, err := startHelper(cmd)
	if err != nil {
		return err
	}
	stopped := false
	defer func() {
		if !stopped {
			store.stop()
		}
	}()
	base := "http://" + addr
	if _, err := store.await(ctx, "The shoe store", 3*time.Minute); err != nil {
		return fmt.Errorf("the shoe store: %w", err)
	}
	// Every request but the feed's is answered within a minute or fails
	// the soak: the store's own request timeout is shorter. An idle
	// connection is closed after soakIdleConn: each one the client keeps
	// is a goroutine and a file of the store's, and a minute's keeping
	// made a moment's slowness (more requests out at once, so more
	// connections) a step in both that lasted past the window's end.
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: soakInFlight, IdleConnTimeout: soakIdleConn}, Timeout: time.Minute}
	defer client.CloseIdleConnections()
	feedClient := &http.Client{Transport: &http.Transport{}}
	defer feedClient.CloseIdleConnections()
	if err := awaitReady(ctx, client, base, 3*time.Minute, logf); err != nil {
		return err
	}
	// Each shoe priced in the catalog view before a sale of it is tried.
	for _, s := range shoes {
		if err := awaitPrice(ctx, client, base, s, load.prices[s], 2*time.Minute); err != nil {
			return fmt.Errorf("before the load: %w", err)
		}
	}
	logf("the store (pid %d) serves %s; load for %s: %g commands/s and %g reads/s on %d shoes, a price change a second, a change feed\n",
		cmd.Process.Pid, base, ss.duration, ss.rate, ss.rate, ss.shoes)

	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	start := time.Now()
	wg.Go(func() { load.sendCommands(loadCtx, client, base, shoes, ss.rate) })
	wg.Go(func() { load.readViews(loadCtx, client, base, shoes, ss.rate) })
	wg.Go(func() { load.followFeed(loadCtx, feedClient, base) })
	wg.Go(func() { load.changePrices(loadCtx, dsn, shoes) })

	var samples []soakSample
	tick := time.NewTicker(ss.every)
	var lastCmds, lastReads, lastFeed int64
	end := time.After(ss.duration)
	var runErr error
sampling:
	for {
		select {
		case <-ctx.Done():
			runErr = ctx.Err()
			break sampling
		case <-end:
			break sampling
		case err := <-store.exited:
			store.exited <- err
			runErr = fmt.Errorf("the shoe store exited during the soak: %v\n%s", err, store.stderr.String())
			break sampling
		case <-tick.C:
			s, err := sampleStore(ctx, client, base, cmd.Process.Pid, stateDir)
			if err != nil {
				load.fail("sampling: %v", err)
				continue
			}
			s.At = time.Since(start).Seconds()
			load.mu.Lock()
			lat := load.cmdLat
			load.cmdLat = nil
			load.mu.Unlock()
			slices.Sort(lat)
			s.CmdP99ms = float64(quantile(lat, 0.99)) / 1e6
			cmds, reads, feed := load.commands.Load(), load.reads.Load(), load.feedEvents.Load()
			s.Commands, s.Reads, s.Feed = cmds-lastCmds, reads-lastReads, feed-lastFeed
			lastCmds, lastReads, lastFeed = cmds, reads, feed
			samples = append(samples, s)
			logf("%5.0f s: RSS %.0f MiB (the state store's %.1f), heap %.0f MiB, %.0f goroutines, %.0f files, state %.2f MiB in tables and %.2f in logs; %d commands (p99 %.0f ms), %d reads, %d changes; %d errors\n",
				s.At, s.Values["rss_mb"], s.Values["state_memory_mb"], s.Values["heap_mb"], s.Values["goroutines"], s.Values["open_fds"], s.Values["state_tables_mb"], s.Values["state_wal_mb"],
				s.Commands, s.CmdP99ms, s.Reads, s.Feed, load.errCount.Load())
		}
	}
	tick.Stop()
	stopLoad()
	wg.Wait()
	if runErr != nil {
		return runErr
	}
	logf("load stopped after %s: %d commands (%d accepted, %d rejected, %d retried with their key), %d reads, %d changes on the feed (%d reconnects), %d price changes (%d reconnects to the database), %d ticks skipped\n",
		time.Since(start).Round(time.Second), load.commands.Load(), load.accepted.Load(), load.rejected.Load(), load.retried.Load(), load.reads.Load(),
		load.feedEvents.Load(), load.feedReconnects.Load(), load.priceChanges.Load(), load.pgReconnects.Load(), load.skipped.Load())
	checkErr := load.settle(ctx, client, base, shoes, logf)
	store.stop()
	stopped = true

	res := soakResult{Settings: ss.String(), Samples: samples, Warmup: ss.warmup.Seconds(), Revision: revisionOf("."),
		Commands: load.commands.Load(), Accepted: load.accepted.Load(), Rejected: load.rejected.Load(), Retried: load.retried.Load(),
		Reads: load.reads.Load(), FeedEvents: load.feedEvents.Load(), FeedReconnects: load.feedReconnects.Load(),
		PriceChanges: load.priceChanges.Load(), Skipped: load.skipped.Load(), Errors: load.errCount.Load(), FirstErrors: load.errs}
	if checkErr != nil {
		res.Check = checkErr.Error()
	}
	fits := res.fit()
	if err := writeSoak(ss.dir, res, fits); err != nil {
		return err
	}
	var problems []string
	for _, f := range fits {
		logf("%s\n", f)
		if !f.Flat && !f.Sum {
			problems = append(problems, f.String())
		}
	}
	if res.Errors > 0 {
		problems = append(problems, fmt.Sprintf("%d errors, first: %s", res.Errors, strings.Join(res.FirstErrors, "; ")))
	}
	if checkErr != nil {
		problems = append(problems, checkErr.Error())
	}
	if res.FeedEvents == 0 {
		problems = append(problems, "the change feed delivered nothing")
	}
	if res.Skipped > 0 {
		problems = append(problems, fmt.Sprintf("the store fell behind the load: %d commands or reads not sent for lack of an answer to the ones before", res.Skipped))
	}
	logf("written to %s\n", ss.dir)
	if len(problems) > 0 {
		return fmt.Errorf("soak: %s", strings.Join(problems, "\n  "))
	}
	return nil
}

func (ss soakSettings) String() string {
	return fmt.Sprintf("-soak %s -soak-warmup %s -soak-every %s -soak-rate %g -soak-shoes %d -soak-retention %s -soak-budget %d -soak-cache %d", ss.duration, ss.warmup, ss.every, ss.rate, ss.shoes, ss.retention, ss.budget, ss.cache)
}

// freeAddr is a loopback address with a port free a moment ago.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func awaitReady(ctx context.Context, client *http.Client, base string, bound time.Duration, logf func(string, ...any)) error {
	deadline := time.Now().Add(bound)
	for next := time.Now(); ; {
		resp, err := client.Get(base + "/readyz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(body))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the shoe store is not ready after %s: %v", bound, err)
		}
		if time.Now().After(next) {
			logf("waiting for the store to be ready: %v\n", err)
			next = time.Now().Add(10 * time.Second)
		}
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// getJSON reads a view's key: found false on 404.
func getJSON(ctx context.Context, client *http.Client, url string, into any) (found bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return false, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return true, json.Unmarshal(body, into)
	case http.StatusNotFound:
		return false, nil
	}
	return false, fmt.Errorf("GET %s: %s: %s", url, resp.Status, bytes.TrimSpace(body))
}

func awaitPrice(ctx context.Context, client *http.Client, base, shoe string, price int64, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	var got struct {
		Value struct {
			PriceCents int64 `json:"price_cents"`
		} `json:"value"`
	}
	for {
		found, err := getJSON(ctx, client, base+"/views/catalog/keys/"+shoe, &got)
		if err == nil && found && got.Value.PriceCents == price {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the catalog view has %s at %d cents (found %v, %v) %s after, want %d", shoe, got.Value.PriceCents, found, err, bound, price)
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// soakInFlight bounds the requests of each kind the load has out at once:
// past it a tick is skipped and counted, and the soak fails.
const soakInFlight = 64

// soakIdleConn is how long the load keeps an idle connection to the store:
// long enough that the steady load reuses its few (a request each 20 ms),
// short enough that those a burst opened are gone by the next sample.
const soakIdleConn = 2 * time.Second

// ticks calls f at rate a second, each call in a goroutine of its own, at
// most soakInFlight at once, until ctx is done; it returns when every call
// has.
func (l *soakLoad) ticks(ctx context.Context, rate float64, f func(context.Context, *rand.Rand)) {
	var wg sync.WaitGroup
	defer wg.Wait()
	sem := make(chan struct{}, soakInFlight)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	interval := time.Duration(float64(time.Second) / rate)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		select {
		case sem <- struct{}{}:
		default:
			l.skipped.Add(1)
			continue
		}
		r := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
		wg.Go(func() {
			defer func() { <-sem }()
			f(ctx, r)
		})
	}
}

// sendCommands sends the inventory's commands: shipments of one to three
// pairs, sales and returns, each with an Idempotency-Key, sent again with
// it while the answer is "no outcome" (504), as a client must.
func (l *soakLoad) sendCommands(ctx context.Context, client *http.Client, base string, shoes []string, rate float64) {
	l.ticks(ctx, rate, func(ctx context.Context, r *rand.Rand) {
		shoe := shoes[r.IntN(len(shoes))]
		var body string
		qty := 0
		kind := r.IntN(100)
		switch {
		case kind < 35:
			qty = 1 + r.IntN(3)
			body = fmt.Sprintf(`{"type":"ReceiveShipment","data":{"quantity":%d,"unitCost":%d}}`, qty, 2000+r.IntN(1000))
		case kind < 85:
			body = `{"type":"SellPair","data":{}}`
		default:
			body = `{"type":"AcceptReturn","data":{"reason":"soak"}}`
		}
		key := fmt.Sprintf("%016x%016x", r.Uint64(), r.Uint64())
		began := time.Now()
		for attempt := 0; ; attempt++ {
			// Not cancelled when the load stops: its outcome counts.
			req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodPost, base+"/aggregates/inventory/"+shoe+"/commands", strings.NewReader(body))
			if err != nil {
				l.fail("command: %v", err)
				return
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", key)
			resp, err := client.Do(req)
			if err != nil {
				l.fail("command on %s: %v", shoe, err)
				return
			}
			out, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var o struct {
				Status string `json:"status"`
			}
			_ = json.Unmarshal(out, &o)
			switch {
			case resp.StatusCode == http.StatusGatewayTimeout && attempt < 5:
				l.retried.Add(1)
				continue
			case resp.StatusCode == http.StatusOK && o.Status == "accepted":
				l.accepted.Add(1)
				l.mu.Lock()
				st := l.expected[shoe]
				switch {
				case qty > 0:
					st.InStock += qty
				case strings.Contains(body, "SellPair"):
					st.InStock--
					st.Sold++
				default:
					st.InStock++
					st.Returned++
				}
				l.mu.Unlock()
			case resp.StatusCode == http.StatusUnprocessableEntity && o.Status == "rejected":
				l.rejected.Add(1)
			default:
				l.fail("command %s on %s: %s: %s", body, shoe, resp.Status, bytes.TrimSpace(out))
				return
			}
			break
		}
		l.commands.Add(1)
		l.mu.Lock()
		l.cmdLat = append(l.cmdLat, time.Since(began))
		l.mu.Unlock()
	})
}

// readViews reads the views a client of the store would: a shoe's
// inventory, its price, its sales of the day, the till.
func (l *soakLoad) readViews(ctx context.Context, client *http.Client, base string, shoes []string, rate float64) {
	l.ticks(ctx, rate, func(ctx context.Context, r *rand.Rand) {
		shoe := shoes[r.IntN(len(shoes))]
		var url string
		switch r.IntN(4) {
		case 0:
			url = base + "/views/inventory/keys/" + shoe
		case 1:
			url = base + "/views/catalog/keys/" + shoe
		case 2:
			url = base + "/views/daily-sales/keys/" + shoe + "/windows"
		default:
			url = base + "/views/till/keys/till"
		}
		var v any
		if _, err := getJSON(context.WithoutCancel(ctx), client, url, &v); err != nil {
			l.fail("read: %v", err)
			return
		}
		l.reads.Add(1)
	})
}

// followFeed follows the inventory's change feed, from where it stands, and
// resumes after its last event when the stream ends.
func (l *soakLoad) followFeed(ctx context.Context, client *http.Client, base string) {
	last := ""
	for ctx.Err() == nil {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/views/inventory/changes", nil)
		if err != nil {
			l.fail("feed: %v", err)
			return
		}
		if last != "" {
			req.Header.Set("Last-Event-ID", last)
		}
		resp, err := client.Do(req)
		if err != nil {
			if ctx.Err() == nil {
				l.fail("feed: %v", err)
			}
			return
		}
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			l.fail("feed: %s: %s", resp.Status, bytes.TrimSpace(b))
			return
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		event := ""
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "id: "):
				last = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: ") && event == "error":
				l.fail("feed: an error event: %s", strings.TrimPrefix(line, "data: "))
			case line == "":
				if event == "change" {
					l.feedEvents.Add(1)
				}
				event = ""
			}
		}
		resp.Body.Close()
		if ctx.Err() == nil {
			l.feedReconnects.Add(1)
		}
	}
}

// changePrices changes a shoe's price in the catalog table once a second,
// on a connection of its own. A connection cut (an administrator's
// pg_terminate_backend, a restart) is counted and made again, and the
// change it cut, made or not, is made again with the same price: an update
// that sets a value is the same done twice. A database unreachable for a
// minute is a failure.
func (l *soakLoad) changePrices(ctx context.Context, dsn string, shoes []string) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	var pg *pgx.Conn
	defer func() {
		if pg != nil {
			pg.Close(context.WithoutCancel(ctx))
		}
	}()
	var down time.Time // since when the database has been unreachable
	i, price := 0, int64(5000+rng.IntN(4000))
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		shoe := shoes[i%len(shoes)]
		err := func() error {
			if pg == nil {
				c, err := pgx.Connect(ctx, dsn)
				if err != nil {
					return err
				}
				pg = c
			}
			_, err := pg.Exec(ctx, `UPDATE catalog SET price_cents = $1 WHERE model = $2`, price, shoe)
			return err
		}()
		if ctx.Err() != nil {
			// The load stopped during this change. Taken or not, it is
			// the database's to say: the catalog view must show what the
			// database holds (a change made as the load stopped, and not
			// counted, once failed the soak with the view right).
			if err == nil {
				l.mu.Lock()
				l.prices[shoe] = price
				l.mu.Unlock()
			} else if p, rerr := readPrice(context.WithoutCancel(ctx), dsn, shoe); rerr == nil {
				l.mu.Lock()
				l.prices[shoe] = p
				l.mu.Unlock()
			}
			return
		}
		if err != nil {
			if pg != nil {
				pg.Close(context.WithoutCancel(ctx))
				pg = nil
				l.pgReconnects.Add(1)
			}
			if down.IsZero() {
				down = time.Now()
			} else if time.Since(down) > time.Minute {
				l.fail("a price change: the catalog database unreachable for a minute: %v", err)
				return
			}
			continue // the same change again
		}
		down = time.Time{}
		l.mu.Lock()
		l.prices[shoe] = price
		l.mu.Unlock()
		l.priceChanges.Add(1)
		i, price = i+1, int64(5000+rng.IntN(4000))
	}
}

// readPrice reads shoe's price in the catalog table.
func readPrice(ctx context.Context, dsn, shoe string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer c.Close(ctx)
	var p int64
	err = c.QueryRow(ctx, `SELECT price_cents FROM catalog WHERE model = $1`, shoe).Scan(&p)
	return p, err
}

// soakSettle is how long the views have, once the load stops, to show
// what it did.
const soakSettle = 2 * time.Minute

// settle waits until every shoe's inventory and price in the views are
// what the load did, for soakSettle at most.
func (l *soakLoad) settle(ctx context.Context, client *http.Client, base string, shoes []string, logf func(string, ...any)) error {
	deadline := time.Now().Add(soakSettle)
	var wrong []string
	for {
		wrong = wrong[:0]
		for _, s := range shoes {
			var inv struct {
				Value shoeState `json:"value"`
			}
			found, err := getJSON(ctx, client, base+"/views/inventory/keys/"+s, &inv)
			want := *l.expected[s]
			if err != nil || (!found && want != shoeState{}) || inv.Value != want {
				wrong = append(wrong, fmt.Sprintf("%s's inventory is %+v (%v), the accepted commands sum to %+v", s, inv.Value, err, want))
			}
			if err := awaitPrice(ctx, client, base, s, l.prices[s], 0); err != nil {
				wrong = append(wrong, err.Error())
			}
		}
		if len(wrong) == 0 {
			logf("the views agree with the load: every shoe's stock, sales, returns and price\n")
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s after the load stopped, %d disagreements, e.g. %s", soakSettle, len(wrong), wrong[0])
		}
		if err := sleepCtx(ctx, 500*time.Millisecond); err != nil {
			return err
		}
	}
}

// sampleStore samples the store's process: its resident memory and open
// files from /proc, its Go heap and goroutines from its /metrics, the
// size of its state directory.
func sampleStore(ctx context.Context, client *http.Client, base string, pid int, stateDir string) (soakSample, error) {
	s := soakSample{Values: map[string]float64{}}
	rss, err := procStatusKB(pid, "VmRSS")
	if err != nil {
		return s, err
	}
	s.Values["rss_mb"] = rss / 1024
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return s, err
	}
	s.Values["open_fds"] = float64(len(fds))
	tables, logs, bound, memBound, err := stateDisk(stateDir)
	if err != nil {
		return s, err
	}
	s.Values["state_tables_mb"], s.Values["state_wal_mb"], s.Values["state_wal_bound_mb"] = tables/(1<<20), logs/(1<<20), bound/(1<<20)
	s.Values["state_memory_bound_mb"] = memBound / (1 << 20)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return s, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("/metrics: %s", resp.Status)
	}
	want := map[string]string{"go_goroutines": "goroutines", "go_memstats_heap_inuse_bytes": "heap_mb"}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	stateMem := 0
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if metric, _, _ := strings.Cut(name, "{"); metric == "oxbow_state_memory_bytes" {
			// Every application's, every part.
			v, err := strconv.ParseFloat(strings.TrimSpace(val[strings.LastIndexByte(val, ' ')+1:]), 64)
			if err != nil {
				return s, fmt.Errorf("/metrics: %s: %w", sc.Text(), err)
			}
			s.Values["state_memory_mb"] += v / (1 << 20)
			stateMem++
			continue
		}
		if series, found := want[name]; ok && found {
			v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
			if err != nil {
				return s, fmt.Errorf("/metrics: %s: %w", name, err)
			}
			if series == "heap_mb" {
				v /= 1 << 20
			}
			s.Values[series] = v
		}
	}
	if err := sc.Err(); err != nil {
		return s, err
	}
	for _, series := range want {
		if _, ok := s.Values[series]; !ok {
			return s, fmt.Errorf("/metrics has no %s", series)
		}
	}
	if stateMem == 0 {
		return s, errors.New("/metrics has no oxbow_state_memory_bytes")
	}
	s.Values["rss_apart_mb"] = s.Values["rss_mb"] - s.Values["state_memory_mb"]
	return s, nil
}

// stateDisk is the disk a state directory's pebble stores take: their
// write-ahead logs (*.log), everything else (tables, manifests), and the
// logs' bound. A store's logs hold what its memtables hold: the one
// written and the queued ones, at most stop-writes threshold + 1 before
// pebble stops writes; and pebble keeps as many flushed logs again to
// recycle (wal.Options.MaxNumRecyclableLogs). So a store's logs stay under
// 2 × (threshold + 1) × memtable size, as its OPTIONS file gives them.
// Between flushes the logs grow with every write (at the soak's rate a
// memtable of 16 MiB takes tens of minutes to fill), so they are held to
// that bound where the tables must be flat. memBound bounds the memory of
// the same memtables, with the one pebble keeps for reuse, plus the block
// cache: (threshold + 2) × memtable size + cache size.
func stateDisk(dir string) (tables, logs, bound, memBound float64, err error) {
	options := map[string]string{} // by store directory: its newest OPTIONS file
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) { // a file pebble just removed
				return nil
			}
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil // removed since
		}
		switch name := d.Name(); {
		case strings.HasSuffix(name, ".log"):
			logs += float64(info.Size())
		default:
			tables += float64(info.Size())
			if strings.HasPrefix(name, "OPTIONS-") && name > filepath.Base(options[filepath.Dir(path)]) {
				options[filepath.Dir(path)] = path
			}
		}
		return nil
	})
	if err != nil {
		return 0, 0, 0, 0, err
	}
	for _, path := range options {
		b, err := os.ReadFile(path)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return 0, 0, 0, 0, err
		}
		size, threshold, cache := 0.0, 0.0, 0.0
		for _, line := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(strings.TrimSpace(line), "=")
			switch k {
			case "mem_table_size":
				size, _ = strconv.ParseFloat(v, 64)
			case "mem_table_stop_writes_threshold":
				threshold, _ = strconv.ParseFloat(v, 64)
			case "cache_size":
				cache, _ = strconv.ParseFloat(v, 64)
			}
		}
		if size == 0 || threshold == 0 {
			return 0, 0, 0, 0, fmt.Errorf("%s names no memtable size or stop-writes threshold", path)
		}
		bound += 2 * (threshold + 1) * size
		memBound += (threshold+2)*size + cache
	}
	return tables, logs, bound, memBound, nil
}

// soakCleanup removes what the soak made: its catalog rows, the replication
// slot and publication of its capture, its topics and consumer groups.
func soakCleanup(ctx context.Context, dsn string, adm *kadm.Client, name string, logf func(string, ...any)) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var errs []error
	// A connection of its own: the soak's may have been cut meanwhile.
	pg, err := pgx.Connect(ctx, dsn)
	if err != nil {
		logf("cleaning up %s: the catalog database: %v\n", name, err)
		return
	}
	defer pg.Close(ctx)
	if _, err := pg.Exec(ctx, `DELETE FROM catalog WHERE model LIKE $1`, name+"-%"); err != nil {
		errs = append(errs, err)
	}
	// The slot is the store's (examples/shoestore's slotName): every slot
	// named after the soak's name.
	if _, err := pg.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name LIKE $1 AND NOT active`, name+"%"); err != nil {
		errs = append(errs, err)
	}
	// And its publication, which the capture names after the slot.
	rows, err := pg.Query(ctx, `SELECT pubname FROM pg_publication WHERE pubname LIKE $1`, name+"%")
	var pubs []string
	if err == nil {
		pubs, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		errs = append(errs, err)
	}
	for _, pub := range pubs {
		if _, err := pg.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{pub}.Sanitize()); err != nil {
			errs = append(errs, err)
		}
	}
	if topics, err := adm.ListTopics(ctx); err != nil {
		errs = append(errs, err)
	} else if mine := withPrefix(topics.Names(), name); len(mine) > 0 {
		_, err := adm.DeleteTopics(ctx, mine...)
		errs = append(errs, err)
	}
	if groups, err := adm.ListGroups(ctx); err != nil {
		errs = append(errs, err)
	} else if mine := withPrefix(groups.Groups(), name); len(mine) > 0 {
		_, err := adm.DeleteGroups(ctx, mine...)
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		logf("cleaning up %s: %v\n", name, err)
	}
}

func withPrefix(names []string, prefix string) []string {
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, prefix) {
			out = append(out, n)
		}
	}
	return out
}

// soakResult is what a soak writes: its settings, samples and counts.
type soakResult struct {
	Settings, Revision string
	Warmup             float64
	Samples            []soakSample

	Commands, Accepted, Rejected, Retried int64
	Reads, FeedEvents, FeedReconnects     int64
	PriceChanges, Skipped, Errors         int64
	FirstErrors                           []string `json:",omitempty"`
	Check                                 string   `json:",omitempty"`
}

// soakFit is a series' line after the warm-up.
type soakFit struct {
	Series, Label, Unit string
	N                   int
	Mean, Slope         float64 // per second
	Intercept           float64
	Resid               float64 // the samples' standard deviation about the line
	Window              float64 // seconds
	Tolerance           float64
	// Bounded: judged by its highest sample (Max) against its bound
	// rather than by its line; Flat then says it stayed under.
	Bounded    bool
	Max, Bound float64
	Flat       bool
	// Sum: not judged itself but by its parts (the resident memory).
	Sum bool
}

func (f soakFit) String() string {
	if f.Bounded {
		return fmt.Sprintf("%s: %d samples, at most %.4g%s, its bound %.4g%s (slope %+.3g%s/h): %s",
			f.Label, f.N, f.Max, f.Unit, f.Bound, f.Unit, f.Slope*3600, f.Unit, map[bool]string{true: "under it", false: "NOT under it"}[f.Flat])
	}
	return fmt.Sprintf("%s: %d samples over %.0f s, mean %.4g%s, slope %+.3g%s/h (the line moves %+.3g over the window; noise ±%.3g; bound %.3g): %s",
		f.Label, f.N, f.Window, f.Mean, f.Unit, f.Slope*3600, f.Unit, f.Slope*f.Window, f.Resid, f.Tolerance, map[bool]string{true: "flat", false: "NOT flat"}[f.Flat])
}

// fit fits each series' samples after the warm-up with a line (least
// squares) and judges it.
func (r soakResult) fit() []soakFit {
	var fits []soakFit
	for _, s := range soakSeries {
		var ts, ys []float64
		for _, smp := range r.Samples {
			if v, ok := smp.Values[s.name]; ok && smp.At >= r.Warmup {
				ts, ys = append(ts, smp.At), append(ys, v)
			}
		}
		f := fitLine(s.name, s.label, s.unit, ts, ys)
		if s.bound == "-" {
			f.Sum = true // judged by its parts, the next two
			fits = append(fits, f)
			continue
		}
		if s.bound != "" {
			// Held to its bound, over every sample, the warm-up's too.
			f.Bounded, f.Flat = true, f.N >= soakMinSamples
			for _, smp := range r.Samples {
				v, ok1 := smp.Values[s.name]
				b, ok2 := smp.Values[s.bound]
				if ok1 {
					f.Max = max(f.Max, v)
				}
				if ok2 && (f.Bound == 0 || b < f.Bound) {
					f.Bound = b
				}
				if !ok1 || !ok2 || v > b {
					f.Flat = false
				}
			}
		}
		fits = append(fits, f)
	}
	return fits
}

// soakMinSamples is the fewest samples a series is judged on.
const soakMinSamples = 6

func fitLine(series, label, unit string, ts, ys []float64) soakFit {
	f := soakFit{Series: series, Label: label, Unit: unit, N: len(ts)}
	if unit != "" {
		f.Unit = " " + unit
	}
	if f.N < soakMinSamples {
		return f // not flat: too few samples to say
	}
	var mt, my float64
	for i := range ts {
		mt += ts[i]
		my += ys[i]
	}
	mt /= float64(f.N)
	my /= float64(f.N)
	var stt, sty float64
	for i := range ts {
		stt += (ts[i] - mt) * (ts[i] - mt)
		sty += (ts[i] - mt) * (ys[i] - my)
	}
	f.Mean = my
	if stt > 0 {
		f.Slope = sty / stt
	}
	f.Intercept = my - f.Slope*mt
	var ss float64
	for i := range ts {
		d := ys[i] - (f.Intercept + f.Slope*ts[i])
		ss += d * d
	}
	f.Resid = math.Sqrt(ss / float64(f.N))
	f.Window = ts[len(ts)-1] - ts[0]
	f.Tolerance = max(3*f.Resid, 0.05*math.Abs(my))
	f.Flat = math.Abs(f.Slope*f.Window) <= f.Tolerance
	return f
}

// writeSoak writes the soak's samples (soak.json), a README.md of its
// fits and counts, and a plot of each series.
func writeSoak(dir string, r soakResult, fits []soakFit) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "soak.json"), b, 0o644); err != nil {
		return err
	}
	var md strings.Builder
	last := 0.0
	if n := len(r.Samples); n > 0 {
		last = r.Samples[n-1].At
	}
	fmt.Fprintf(&md, "# The soak\n\nMade by `go run ./bench %s` (bench/soak.go), revision %s, on this machine (2 CPUs), real Kafka and PostgreSQL "+
		"(`scripts/services.sh`). The shoe store's views' service ran %.0f minutes under steady load; a sample every %s; the first %.0f s are the warm-up, "+
		"left out of the fits. A series is flat when its line moves over the window by no more than the larger of three standard deviations of the samples "+
		"about it and 5%% of its mean. The stores' write-ahead logs grow with every write until a memtable fills and is flushed (tens of minutes at this "+
		"rate), so they are held instead to their bound, 2 × (stop-writes threshold + 1) × memtable size a store (the live logs and as many kept to "+
		"recycle), from each store's OPTIONS file; so is the memory of the memtables and the block cache (oxbow.state.memory), its bound "+
		"(threshold + 2) × memtable size plus the cache's size, and the resident memory apart from it must be flat.\n\n", r.Settings, r.Revision, last/60, soakEvery(r), r.Warmup)
	md.WriteString("| series | samples | mean | slope per hour | line's move over the window | noise (sd about the line) | bound | verdict |\n|---|---|---|---|---|---|---|---|\n")
	for _, f := range fits {
		verdict, bound := "flat", fmt.Sprintf("%.3g", f.Tolerance)
		switch {
		case f.Sum:
			verdict = "the sum of the next two"
		case f.Bounded && f.Flat:
			verdict, bound = fmt.Sprintf("under its bound (at most %.3g)", f.Max), fmt.Sprintf("%.3g%s", f.Bound, f.Unit)
		case f.Bounded:
			verdict, bound = fmt.Sprintf("**over its bound** (at most %.3g)", f.Max), fmt.Sprintf("%.3g%s", f.Bound, f.Unit)
		case !f.Flat:
			verdict = "**not flat**"
		}
		fmt.Fprintf(&md, "| %s | %d | %s%s | %+.3g%s | %+.3g | %.3g | %s | %s |\n", f.Label, f.N, fmtNum(f.Mean), f.Unit, f.Slope*3600, f.Unit, f.Slope*f.Window, f.Resid, bound, verdict)
	}
	fmt.Fprintf(&md, "\nThe load: %d commands answered (%d accepted, %d rejected: out of stock or nothing to return; %d sent again with their key after "+
		"\"no outcome\"), %d view reads, %d changes on the inventory's feed (%d reconnects), %d price changes captured from PostgreSQL; %d ticks skipped, %d errors.",
		r.Commands, r.Accepted, r.Rejected, r.Retried, r.Reads, r.FeedEvents, r.FeedReconnects, r.PriceChanges, r.Skipped, r.Errors)
	if r.Check == "" {
		md.WriteString(" At the end every shoe's stock, sales, returns and price in the views were what the load had done.\n")
	} else {
		fmt.Fprintf(&md, " At the end the views disagreed: %s\n", r.Check)
	}
	for _, f := range fits {
		file := "soak-" + strings.ReplaceAll(f.Series, "_", "-") + ".png"
		if err := plotSoak(r, f, filepath.Join(dir, file)); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		fmt.Fprintf(&md, "\n![%s](%s)\n", f.Label, file)
	}
	return os.WriteFile(filepath.Join(dir, "README.md"), []byte(md.String()), 0o644)
}

func soakEvery(r soakResult) string {
	if len(r.Samples) < 2 {
		return "–"
	}
	return (time.Duration((r.Samples[1].At - r.Samples[0].At) * float64(time.Second))).Round(time.Second).String()
}
