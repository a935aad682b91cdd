package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The curves (-curves): how Oxbow's costs grow with the size of what it
// holds, each measured at several sizes on this machine, -curve-reps
// times a point, written to -curve-dir as JSON lines (<curve>.jsonl, one
// line a point's repetition), PNG plots (gonum/plot) and a README.md of tables that
// every curve's file there makes:
//
//   - restore: a fresh instance restoring a table's store of -restore-gb
//     gigabytes of distinct keys from its changelog, against a franz-go
//     consumer reading the same changelog (which goes first alternating
//     from one repetition to the next), its peak RSS; then, served by that
//     instance, a sample of its keys read and checked over HTTP and an
//     open loop of point reads of random keys (reads that miss the block
//     cache): their p50 and p99 against the store's size. The changelog
//     holds the keys in their order, so each restore batch's keys follow
//     the previous batch's;
//   - restore-random: the same with the keys in a scrambled order, as a
//     compacted changelog's are (the order of each key's last update):
//     every batch's keys spread over the whole store;
//   - keys: the count topology at least once, at the engine's defaults,
//     on inputs of -curve-keys distinct keys (as many records as keys, at
//     least -records): records/s and peak RSS against keys;
//   - partitions: the same on -curve-partitions input partitions, at
//     -keys keys and -records records: records/s and peak RSS;
//   - instances: -curve-instances instance processes of one application
//     (instances.go): the group's records/s, the pause and settling of a
//     rebalance as one more instance joins, and the time a stopped
//     instance's tasks take to serve again elsewhere with a warm standby
//     and without.
//
// Each point's output or store is checked as the report's runs are: a
// wrong one fails the curve.
var curveNames = []string{"restore", "restore-random", "keys", "partitions", "instances"}

// curveMemoryBudget is the Oxbow instances' MemoryBudget in the curves
// unless -memory-budget says otherwise: at 10M keys the state is well past
// it, and the peak RSS is measured against it.
const curveMemoryBudget = 256 << 20

// curvePoint is one repetition of a curve's point: x, and what was
// measured there by name (curveSeries names them).
type curvePoint struct {
	Curve    string
	X        float64
	Rep      int
	Values   map[string]float64
	Wrong    int    `json:",omitempty"`
	Example  string `json:",omitempty"`
	Revision string `json:",omitempty"`
	Finished time.Time
}

// curveSettings are the curves' flags.
type curveSettings struct {
	names      []string
	reps       int
	dir        string
	restoreGB  []float64
	keys       []int
	partitions []int
	readRate   float64
	readFor    time.Duration
	// The instances curve's: instance counts, input partitions and
	// records, keys of the move part's store.
	instances      []int
	instPartitions int
	instRecords    int
	moveKeys       int
}

// curves runs the selected curves, one after the other, each point's
// repetitions in turn, and writes every curve's file in the directory.
func curves(ctx context.Context, c benchConfig, cs curveSettings) error {
	rep := &report{started: time.Now(), revision: revisionOf(".")}
	rn, _, err := newRunner(c, rep)
	if err != nil {
		return err
	}
	defer rn.close()
	pin, undo := pin(c.brokers, c.pin)
	defer undo()
	rn.pin = pin
	rn.logf("%s\n", pin.note)
	if err := os.MkdirAll(cs.dir, 0o755); err != nil {
		return err
	}
	for _, name := range cs.names {
		path := filepath.Join(cs.dir, name+".jsonl")
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		enc := json.NewEncoder(f)
		add := func(p curvePoint) error {
			p.Curve, p.Revision, p.Finished = name, rep.revision, time.Now()
			for k, v := range p.Values {
				if math.IsNaN(v) || math.IsInf(v, 0) {
					delete(p.Values, k) // not measured (JSON has no NaN)
				}
			}
			if p.Wrong > 0 {
				rn.rep.mismatches = append(rn.rep.mismatches, fmt.Sprintf("curve %s at %g, repetition %d: %d wrong, e.g. %s", name, p.X, p.Rep+1, p.Wrong, p.Example))
			}
			return enc.Encode(p)
		}
		switch name {
		case "restore", "restore-random":
			err = rn.restoreCurve(ctx, cs, name == "restore-random", add)
		case "keys", "partitions":
			err = rn.throughputCurve(ctx, cs, name, add)
		case "instances":
			err = rn.instancesCurve(ctx, cs, add)
		}
		err = errors.Join(err, f.Close())
		if err != nil {
			return fmt.Errorf("curve %s: %w", name, err)
		}
		rn.logf("curve %s written to %s\n", name, path)
	}
	if err := writeCurvesReadme(cs.dir); err != nil {
		return err
	}
	if len(rn.rep.mismatches) > 0 {
		return fmt.Errorf("wrong outputs:\n  %s", strings.Join(rn.rep.mismatches, "\n  "))
	}
	return nil
}

// The restore curve's store: key i is kvKey(i), its value kvValue(i), 100
// bytes, a function of i alone, so that the reads can check any key.
func kvKey(i int) string { return fmt.Sprintf("k%010d", i) }

func kvValue(i int) []byte {
	v := make([]byte, 100)
	copy(v, fmt.Sprintf("v%010d-", i))
	x := uint64(i)*0x9e3779b97f4a7c15 + 1
	for j := 12; j < len(v); j++ {
		x ^= x >> 31
		x *= 0xbf58476d1ce4e5b9
		v[j] = byte('a' + (x>>40)%26)
	}
	return v
}

// scramble is a permutation of 0..n-1 that spreads neighbours apart: i
// times a multiplier prime to n, modulo n.
func scramble(n int) func(int) int {
	m := 0x9e3779b1 % max(n, 1)
	for gcd(m, n) != 1 {
		m++
	}
	return func(i int) int { return int(uint64(i) * uint64(m) % uint64(n)) }
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// restoreCurve fills a table's changelog with n distinct keys for each
// size, in their order or scrambled, then restores it in a fresh instance
// (and reads it raw) -curve-reps times.
func (rn *runner) restoreCurve(ctx context.Context, cs curveSettings, scrambled bool, add func(curvePoint) error) error {
	c := rn.c
	for _, gb := range cs.restoreGB {
		n := int(gb * 1e9 / float64(len(kvKey(0))+len(kvValue(0))))
		app := fmt.Sprintf("oxbench-%s-restore-%d", rn.id, n)
		if scrambled {
			app = fmt.Sprintf("oxbench-%s-restore-random-%d", rn.id, n)
		}
		input, changelog := app+"-in", app+"-kv-changelog"
		if err := createTopics(ctx, rn.adm, c.partitions, input); err != nil {
			return err
		}
		compact := "compact"
		res, err := rn.adm.CreateTopics(ctx, c.partitions, -1, map[string]*string{"cleanup.policy": &compact}, changelog)
		if err == nil {
			err = res.Error()
		}
		if err != nil {
			rn.cleanup(app, input)
			return err
		}
		err = rn.restorePoints(ctx, cs, gb, n, scrambled, app, input, changelog, add)
		rn.cleanup(app, input, changelog)
		if err != nil {
			return err
		}
	}
	return nil
}

func (rn *runner) restorePoints(ctx context.Context, cs curveSettings, gb float64, n int, scrambled bool, app, input, changelog string, add func(curvePoint) error) error {
	rn.logf("curve restore: writing %d records (%.2f GB of keys and values) to %s\n", n, gb, changelog)
	start := time.Now()
	var mu sync.Mutex
	var firstErr error
	done := func(_ *kgo.Record, err error) {
		if err != nil {
			mu.Lock()
			firstErr = cmpErr(firstErr, err)
			mu.Unlock()
		}
	}
	// franz-go's default partitioner is Kafka's (murmur2 of the key), as
	// Oxbow's: each key in the partition whose task serves it.
	order := func(i int) int { return i }
	if scrambled {
		order = scramble(n)
	}
	for i := range n {
		k := order(i)
		rn.cl.Produce(ctx, &kgo.Record{Topic: changelog, Key: []byte(kvKey(k)), Value: kvValue(k)}, done)
	}
	if err := rn.cl.Flush(ctx); err != nil {
		return err
	}
	if firstErr != nil {
		return firstErr
	}
	rn.logf("curve restore: written in %.1f s\n", time.Since(start).Seconds())
	for rep := range cs.reps {
		p := curvePoint{X: gb, Rep: rep, Values: map[string]float64{}}
		var r restoreResult
		restore := func() error {
			dir, err := os.MkdirTemp("", "oxbench-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			fl := childFlags{kind: "oxbow", topology: "kv", guarantee: "alos", input: input, output: input, app: app, brokers: strings.Join(rn.c.brokers, ","),
				commitMs: rn.c.commitMs, cacheBytes: rn.c.cacheBytes, memoryBudget: rn.c.memBudget, workers: rn.c.threads, stateDir: dir, lingerMs: -1, leave: true,
				restoreStats: true, serve: "127.0.0.1:0"}
			h, err := startHelper(rn.pin.command(ctx, os.Environ(), rn.self, fl.args()...))
			if err != nil {
				return err
			}
			defer h.stop()
			line, err := h.await(ctx, "RESTORED ", 30*time.Minute)
			if err == nil {
				err = parseFields(line, map[string]any{"records": &r.Records, "seconds": &r.Seconds, "ready": &r.StartToReady})
			}
			var base string
			if err == nil {
				base, err = h.await(ctx, "SERVING ", time.Minute)
			}
			if err != nil {
				return fmt.Errorf("restore: %w", err)
			}
			if st, err := readProc(h.cmd.Process.Pid); err == nil {
				p.Values["restore_rss_mb"] = st.peakRSSMB
			}
			rn.logf("curve restore: %d records restored in %.2f s; reading it\n", r.Records, r.Seconds)
			return rn.kvReads(ctx, cs, &p, base, n, h.cmd.Process.Pid)
		}
		raw := func() error {
			fl := childFlags{kind: "changelog", input: changelog, brokers: strings.Join(rn.c.brokers, ",")}
			h, err := startHelper(rn.pin.command(ctx, os.Environ(), rn.self, fl.args()...))
			if err != nil {
				return err
			}
			defer h.stop()
			line, err := h.await(ctx, "CONSUMED ", 30*time.Minute)
			if err != nil {
				return fmt.Errorf("raw consume: %w", err)
			}
			return parseFields(line, map[string]any{"records": &r.RawRecords, "bytes": &r.RawBytes, "seconds": &r.RawSeconds})
		}
		steps := []func() error{restore, raw}
		if rep%2 == 1 {
			steps[0], steps[1] = raw, restore
		}
		for _, step := range steps {
			if err := step(); err != nil {
				return err
			}
		}
		if r.Records != int64(n) || r.RawRecords != int64(n) {
			p.Wrong++
			p.Example = fmt.Sprintf("%d records restored and %d read raw, of %d", r.Records, r.RawRecords, n)
		}
		p.Values["records"] = float64(r.Records)
		p.Values["changelog_gb"] = float64(r.RawBytes) / 1e9
		p.Values["restore_s"], p.Values["raw_s"] = r.Seconds, r.RawSeconds
		p.Values["restore_mb_s"], p.Values["raw_mb_s"] = r.mbPerSec(), r.rawMBPerSec()
		p.Values["restore_vs_raw"] = r.perSec() / r.rawPerSec()
		p.Values["start_to_ready_s"] = r.StartToReady
		p.Values["budget_mb"] = float64(rn.c.memBudget) / (1 << 20)
		rn.logf("curve restore at %.2f GB, repetition %d: restore %.2f s (%.0f MB/s), raw %.2f s (%.0f MB/s): %.2f×; reads p50 %.2f ms, p99 %.2f ms\n",
			gb, rep+1, r.Seconds, r.mbPerSec(), r.RawSeconds, r.rawMBPerSec(), p.Values["restore_vs_raw"], p.Values["read_p50_ms"], p.Values["read_p99_ms"])
		if err := add(p); err != nil {
			return err
		}
	}
	return nil
}

// curveReadSample is how many keys of a restored store are read and
// checked, closed loop, before the open loop.
const curveReadSample = 20_000

// kvReads reads the restored kv store served at base: a sample of keys,
// each checked, then an open loop of point reads of random keys at
// -curve-read-rate, each answer checked.
func (rn *runner) kvReads(ctx context.Context, cs curveSettings, p *curvePoint, base string, n, server int) error {
	tr := &http.Transport{MaxConnsPerHost: httpConns, MaxIdleConns: httpConns, MaxIdleConnsPerHost: httpConns, IdleConnTimeout: time.Minute,
		DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	// Request i reads the key a mix of i picks: scattered over the store,
	// the same from one run to the next.
	keyOf := func(i int) int {
		x := uint64(i)*0x9e3779b97f4a7c15 + 7
		x ^= x >> 29
		x *= 0xbf58476d1ce4e5b9
		x ^= x >> 32
		return int(x % uint64(n))
	}
	read := func(ctx context.Context, i int) (reqOutcome, string) {
		k := keyOf(i)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/views/kv/keys/"+kvKey(k), nil)
		if err != nil {
			return reqError, err.Error()
		}
		resp, err := client.Do(req)
		if err != nil {
			return reqError, err.Error()
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return reqError, err.Error()
		}
		want := fmt.Sprintf("{\"key\":%q,\"value\":%q}\n", kvKey(k), kvValue(k))
		if resp.StatusCode != http.StatusOK || string(body) != want {
			return reqWrong, fmt.Sprintf("key %s: expected 200 %s, got %d %s", kvKey(k), strings.TrimSpace(want), resp.StatusCode, strings.TrimSpace(string(body)))
		}
		return reqOK, ""
	}
	// The sample, closed loop, 8 at a time; it warms the connections.
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := 0
	for range 8 {
		wg.Go(func() {
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= curveReadSample || ctx.Err() != nil {
					return
				}
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				o, note := read(rctx, -1-i)
				cancel()
				if o != reqOK {
					mu.Lock()
					p.Wrong++
					if p.Example == "" {
						p.Example = note
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	spec := loadSpec{rate: cs.readRate, warmup: cs.readFor / 5, measure: cs.readFor, timeout: 5 * time.Second, workers: httpConns}
	res, err := runOpenLoopOn(ctx, spec, 0, server, rn.pin.brokerPID, read)
	if err != nil {
		return err
	}
	p.Wrong += res.Wrong
	if res.Example != "" && p.Example == "" {
		p.Example = res.Example
	}
	p.Values["read_rate"] = res.Achieved
	p.Values["read_p50_ms"] = float64(res.P50) / 1e6
	p.Values["read_p99_ms"] = float64(res.P99) / 1e6
	p.Values["read_errors"] = float64(res.Errors)
	rn.logf("curve restore: reads at %.0f/s: %s\n", cs.readRate, res)
	return nil
}

// throughputCurve runs the count topology at least once, at the engine's
// defaults, on an input made for each point: keys (-curve-keys, as many
// records as keys and at least -records) or partitions (-curve-partitions).
func (rn *runner) throughputCurve(ctx context.Context, cs curveSettings, name string, add func(curvePoint) error) error {
	xs := cs.keys
	if name == "partitions" {
		xs = cs.partitions
	}
	for _, x := range xs {
		prn := *rn
		prn.c.records = max(rn.c.records, x)
		if name == "partitions" {
			prn.c.records, prn.c.partitions = rn.c.records, int32(x)
		} else {
			prn.c.keys = x
		}
		prn.input = fmt.Sprintf("oxbench-%s-%s-%d-input", rn.id, name, x)
		prn.table = fmt.Sprintf("oxbench-%s-%s-%d-table", rn.id, name, x)
		if err := createTopics(ctx, rn.adm, prn.c.partitions, prn.input, prn.table); err != nil {
			return err
		}
		err := func() error {
			defer rn.deleteTopics(prn.input, prn.table)
			rn.logf("curve %s: loading %d records (%d keys) on %d partitions\n", name, prn.c.records, prn.c.keys, prn.c.partitions)
			var err error
			if prn.in, err = load(ctx, rn.cl, prn.c, prn.input, prn.table); err != nil {
				return err
			}
			for rep := range cs.reps {
				s := spec{cfg: defaultsConfig(), engine: "oxbow", topology: "count", guarantee: "alos"}
				r, err := prn.throughput(ctx, s, rep)
				if err != nil {
					return err
				}
				p := curvePoint{X: float64(x), Rep: rep, Values: map[string]float64{
					"records": float64(r.moved.in), "records_per_s": r.recordsPerSec, "steady_records_per_s": r.steady.recordsPerSec(),
					"peak_rss_mb": r.peakRSSMB, "changelog_records": float64(r.moved.changelog), "keys": float64(prn.c.keys),
					"partitions": float64(prn.c.partitions), "steady_cpu_s": r.steady.cpu, "budget_mb": float64(rn.c.memBudget) / (1 << 20),
				}}
				if r.check.wrong > 0 {
					p.Wrong, p.Example = r.check.wrong, r.check.String()
				}
				if err := add(p); err != nil {
					return err
				}
			}
			return nil
		}()
		if err != nil {
			return err
		}
	}
	return nil
}

// curveSeries are what a curve's tables and plots show of its points.
type curveSeries struct {
	value, label string
}

type curvePlot struct {
	file, title, xLabel, yLabel string
	logX                        bool
	series                      []curveSeries
}

type curveDoc struct {
	title, xLabel, about string
	table                []curveSeries
	plots                []curvePlot
}

// restoreTable is the columns of both restore curves.
var restoreTable = []curveSeries{{"records", "records"}, {"restore_s", "restore s"}, {"raw_s", "raw consume s"}, {"restore_mb_s", "restore MB/s"},
	{"raw_mb_s", "raw MB/s"}, {"restore_vs_raw", "restore ÷ raw"}, {"budget_mb", "budget MiB"}, {"restore_rss_mb", "peak RSS MiB"}, {"read_p50_ms", "read p50 ms"},
	{"read_p99_ms", "read p99 ms"}}

var curveDocs = map[string]curveDoc{
	"restore": {
		title: "Restore and point reads against the store's size", xLabel: "changelog GB",
		about: "A fresh instance restores a table's store of distinct keys (11-byte keys, 100-byte values, 6 partitions) from its changelog, " +
			"against a franz-go consumer reading the same changelog; then serves it, and point reads of random keys (the block cache holds a " +
			"fraction of the store) run open loop at a fixed rate.",
		table: restoreTable,
		plots: []curvePlot{
			{file: "restore-rate.png", title: "Restore against the raw consume", xLabel: "changelog GB", yLabel: "MB/s",
				series: []curveSeries{{"restore_mb_s", "Oxbow restore"}, {"raw_mb_s", "franz-go consume"}}},
			{file: "restore-reads.png", title: "HTTP point reads of random keys", xLabel: "changelog GB", yLabel: "ms",
				series: []curveSeries{{"read_p50_ms", "p50"}, {"read_p99_ms", "p99"}}},
		},
	},
	"restore-random": {
		title: "Restore of keys in a scrambled order", xLabel: "changelog GB",
		about: "As above, but the changelog holds the keys in a scrambled order, as a compacted changelog holds a table's keys (in the " +
			"order of their last updates): every batch a restore sorts overlaps the ones before it, so the batches are kept as sorted runs " +
			"and merged into the store's tables at the end.",
		table: restoreTable,
		plots: []curvePlot{
			{file: "restore-random-rate.png", title: "Restore of scrambled keys against the raw consume", xLabel: "changelog GB", yLabel: "MB/s",
				series: []curveSeries{{"restore_mb_s", "Oxbow restore"}, {"raw_mb_s", "franz-go consume"}}},
		},
	},
	"keys": {
		title: "The count against distinct keys", xLabel: "keys",
		about: "The count topology at least once, the engine's defaults but a MemoryBudget, one instance (2 workers) on one CPU; as many input records as keys, " +
			"-records (5M) at least, 6 partitions; the changelog records are the ones written (the record cache absorbs repeated keys).",
		table: []curveSeries{{"records", "records"}, {"records_per_s", "records/s"}, {"steady_records_per_s", "steady records/s"},
			{"budget_mb", "budget MiB"}, {"peak_rss_mb", "peak RSS MiB"}, {"changelog_records", "changelog records"}},
		plots: []curvePlot{
			{file: "keys-throughput.png", title: "Count throughput against keys", xLabel: "distinct keys", yLabel: "records/s", logX: true,
				series: []curveSeries{{"records_per_s", "end to end"}, {"steady_records_per_s", "steady window"}}},
			{file: "keys-rss.png", title: "Peak RSS against keys", xLabel: "distinct keys", yLabel: "MiB", logX: true,
				series: []curveSeries{{"peak_rss_mb", "peak RSS"}, {"budget_mb", "MemoryBudget"}}},
		},
	},
	"partitions": {
		title: "The count against input partitions", xLabel: "partitions",
		about: "The count topology at least once, the engine's defaults but a MemoryBudget, one instance (2 workers) on one CPU, every partition's task on it.",
		table: []curveSeries{{"records", "records"}, {"keys", "keys"}, {"records_per_s", "records/s"}, {"steady_records_per_s", "steady records/s"},
			{"budget_mb", "budget MiB"}, {"peak_rss_mb", "peak RSS MiB"}},
		plots: []curvePlot{
			{file: "partitions-throughput.png", title: "Count throughput against partitions", xLabel: "partitions", yLabel: "records/s", logX: true,
				series: []curveSeries{{"records_per_s", "end to end"}, {"steady_records_per_s", "steady window"}}},
			{file: "partitions-rss.png", title: "Peak RSS against partitions", xLabel: "partitions", yLabel: "MiB", logX: true,
				series: []curveSeries{{"peak_rss_mb", "peak RSS"}, {"budget_mb", "MemoryBudget"}}},
		},
	},
	"instances": {
		title: "Instances of one application", xLabel: "instances",
		about: instancesAbout,
		table: []curveSeries{{"records_per_s", "records/s"}, {"window_s", "window s"}, {"steady_pause_s", "steady pause s"},
			{"join_pause_s", "join pause s"}, {"join_settle_s", "join settle s"}, {"join_records_per_s", "records/s joining"},
			{"move_warm_tasks", "tasks moved warm"}, {"move_warm_assigned_s", "warm assigned s"}, {"move_warm_s", "move warm s"}, {"move_warm_restored", "warm restored"},
			{"move_cold_tasks", "tasks moved cold"}, {"move_cold_assigned_s", "cold assigned s"}, {"move_cold_s", "move cold s"}, {"move_cold_restored", "cold restored"},
			{"move_cold_changelog", "cold moved changelog"}},
		plots: []curvePlot{
			{file: "instances-throughput.png", title: "Count throughput of the group against instances (one CPU)", xLabel: "instances", yLabel: "records/s",
				series: []curveSeries{{"records_per_s", "steady window"}, {"join_records_per_s", "while one more joins"}}},
			{file: "instances-rebalance.png", title: "One more instance joining", xLabel: "instances before the join", yLabel: "s",
				series: []curveSeries{{"join_pause_s", "longest partition pause"}, {"join_settle_s", "settled after"}, {"steady_pause_s", "longest pause, no join"}}},
			{file: "instances-move.png", title: "A stopped instance's tasks serving again elsewhere", xLabel: "instances", yLabel: "s",
				series: []curveSeries{{"move_warm_s", "warm standby"}, {"move_cold_s", "no standby"}, {"move_cold_assigned_s", "assigned elsewhere (no standby)"}}},
		},
	},
}

// readCurve reads a curve's points from its file.
func readCurve(path string) ([]curvePoint, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var pts []curvePoint
	dec := json.NewDecoder(strings.NewReader(string(b)))
	for dec.More() {
		var p curvePoint
		if err := dec.Decode(&p); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		pts = append(pts, p)
	}
	return pts, nil
}

// byX groups points by x, in x's order.
func byX(pts []curvePoint) ([]float64, map[float64][]curvePoint) {
	m := map[float64][]curvePoint{}
	var xs []float64
	for _, p := range pts {
		if _, ok := m[p.X]; !ok {
			xs = append(xs, p.X)
		}
		m[p.X] = append(m[p.X], p)
	}
	slices.Sort(xs)
	return xs, m
}

// valuesOf is a series' values at the points, NaN left out.
func valuesOf(pts []curvePoint, value string) []float64 {
	var vs []float64
	for _, p := range pts {
		if v, ok := p.Values[value]; ok && !math.IsNaN(v) {
			vs = append(vs, v)
		}
	}
	slices.Sort(vs)
	return vs
}

func median(sorted []float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	m := len(sorted) / 2
	if len(sorted)%2 == 1 {
		return sorted[m]
	}
	return (sorted[m-1] + sorted[m]) / 2
}

// writeCurvesReadme writes dir/README.md from the curve files in dir, and
// each curve's plots.
func writeCurvesReadme(dir string) error {
	var b strings.Builder
	b.WriteString("# How Oxbow's costs grow\n\nMade by `go run ./bench -curves ...` (bench/curves.go) from the points in this directory's `.jsonl` files: " +
		"each cell is the median over the point's repetitions, [min–max] after it when there were several. This machine: 2 CPUs, the broker " +
		"and the harness pinned to one, the measured process to the other.\n")
	for _, name := range curveNames {
		pts, err := readCurve(filepath.Join(dir, name+".jsonl"))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		doc := curveDocs[name]
		fmt.Fprintf(&b, "\n## %s\n\n%s", doc.title, doc.about)
		if len(pts) > 0 {
			fmt.Fprintf(&b, " Revision %s, %s.", pts[0].Revision, pts[len(pts)-1].Finished.Format("2006-01-02"))
		}
		b.WriteString("\n\n| " + doc.xLabel + " | reps |")
		for _, s := range doc.table {
			b.WriteString(" " + s.label + " |")
		}
		b.WriteString("\n|---|---|" + strings.Repeat("---|", len(doc.table)) + "\n")
		xs, at := byX(pts)
		for _, x := range xs {
			fmt.Fprintf(&b, "| %s | %d |", fmtNum(x), len(at[x]))
			for _, s := range doc.table {
				vs := valuesOf(at[x], s.value)
				switch {
				case len(vs) == 0:
					b.WriteString(" – |")
				case len(vs) == 1 || vs[0] == vs[len(vs)-1]:
					fmt.Fprintf(&b, " %s |", fmtNum(vs[0]))
				default:
					fmt.Fprintf(&b, " %s [%s–%s] |", fmtNum(median(vs)), fmtNum(vs[0]), fmtNum(vs[len(vs)-1]))
				}
			}
			b.WriteString("\n")
		}
		for _, pl := range doc.plots {
			if err := plotPNG(pl, pts, filepath.Join(dir, pl.file)); err != nil {
				return fmt.Errorf("%s: %w", pl.file, err)
			}
			fmt.Fprintf(&b, "\n![%s](%s)\n", pl.title, pl.file)
		}
	}
	return os.WriteFile(filepath.Join(dir, "README.md"), []byte(b.String()), 0o644)
}

// fmtNum writes a figure with three significant digits, thousands
// separated.
func fmtNum(v float64) string {
	switch a := math.Abs(v); {
	case math.IsNaN(v):
		return "–"
	case a >= 999.5:
		s := strconv.FormatFloat(math.Round(v), 'f', 0, 64)
		// Three significant digits, then separators.
		if d := len(strings.TrimPrefix(s, "-")) - 3; d > 0 {
			p := math.Pow(10, float64(d))
			s = strconv.FormatFloat(math.Round(v/p)*p, 'f', 0, 64)
		}
		neg := strings.HasPrefix(s, "-")
		s = strings.TrimPrefix(s, "-")
		var out []byte
		for i := range len(s) {
			if i > 0 && (len(s)-i)%3 == 0 {
				out = append(out, ',')
			}
			out = append(out, s[i])
		}
		if neg {
			return "-" + string(out)
		}
		return string(out)
	case a >= 100 || v == math.Trunc(v):
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}
