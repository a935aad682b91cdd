package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"slices"
	"time"
)

// The results file keeps a run's figures as it goes, one JSON object a
// line: a header, then every run as it ends. A full run takes longer than
// a session; split into parts (by -config, or -reps a few at a time), each
// with its own -results file, it is reported as one by -merge.

type resultsHeader struct {
	Header  bool // tells the header from a run
	Started time.Time
	Args    []string
	// Revision: the commit the part ran (git rev-parse --short HEAD),
	// "+changes" when the work tree differed from it.
	Revision string
	// The input and the settings every part of a merged report must share.
	Records    int
	Keys       int
	Partitions int32
	ValueSize  int
	Setup      resultsSetup
	Pin        string
	BrokerPID  int
	BrokerWhy  string
	BrokerJVM  string
}

type resultsSetup struct {
	Brokers                 []string
	CommitMs                int
	CacheBytes              int64
	Threads                 int
	LiveRate                int
	LiveFor, LiveWarmup     time.Duration
	TunedBatchBytes         int
	TunedLinger             time.Duration
	TunedCompression        string
	TunedJVM                []string
	TunedRocksDB, TunedMemt int64
	TunedGoMemLimit         string
	Phases                  phaseSettings
}

func setupOf(c benchConfig) resultsSetup {
	t := c.tuned
	return resultsSetup{Brokers: c.brokers, CommitMs: c.commitMs, CacheBytes: c.cacheBytes, Threads: c.threads, LiveRate: c.liveRate,
		LiveFor: c.liveFor, LiveWarmup: c.liveWarmup, TunedBatchBytes: t.batchBytes, TunedLinger: t.linger, TunedCompression: t.compression,
		TunedJVM: t.jvm, TunedRocksDB: t.rocksdbBytes, TunedMemt: t.rocksdbMemtab, TunedGoMemLimit: t.goMemLimit,
		Phases: c.phases}
}

func (s resultsSetup) apply(c *benchConfig) {
	c.brokers, c.commitMs, c.cacheBytes, c.threads = s.Brokers, s.CommitMs, s.CacheBytes, s.Threads
	c.liveRate, c.liveFor, c.liveWarmup = s.LiveRate, s.LiveFor, s.LiveWarmup
	c.tuned = tunedConfig(s.TunedBatchBytes, s.TunedLinger, s.TunedCompression)
	c.tuned.jvm, c.tuned.rocksdbBytes, c.tuned.rocksdbMemtab, c.tuned.goMemLimit = s.TunedJVM, s.TunedRocksDB, s.TunedMemt, s.TunedGoMemLimit
	c.phases = s.Phases
}

// phaseLine is a phase's repetition in the results file (Phase tells it
// from a run of a topology or a baseline).
type phaseLine struct {
	Phase    string
	Run      phaseRun
	Finished time.Time
}

type verdictRecord struct {
	Records, Wrong, Repeated int
	Example                  string `json:",omitempty"`
}

type runRecord struct {
	Rep, Seq                            int
	Config, Engine, Topology, Guarantee string
	Seconds, RecordsPerSec              float64
	Moved                               [3]int64 // in, out, changelog
	SteadyOK                            bool
	SteadySeconds                       float64
	SteadyMoved                         [3]int64
	SteadyCPU, SteadyBrokerCPU          float64
	PeakRSSMB                           float64
	P50, P99, P999                      time.Duration
	LatencySamples                      int
	Check, LiveCheck                    verdictRecord
	Finished                            time.Time
}

func toRecord(x run) runRecord {
	v := func(v verdict) verdictRecord { return verdictRecord{v.records, v.wrong, v.repeated, v.example} }
	return runRecord{Rep: x.rep, Seq: x.seq, Config: x.config, Engine: x.engine, Topology: x.topology, Guarantee: x.guarantee,
		Seconds: x.seconds, RecordsPerSec: x.recordsPerSec, Moved: [3]int64{x.moved.in, x.moved.out, x.moved.changelog},
		SteadyOK: x.steady.ok, SteadySeconds: x.steady.seconds, SteadyMoved: [3]int64{x.steady.moved.in, x.steady.moved.out, x.steady.moved.changelog},
		SteadyCPU: x.steady.cpu, SteadyBrokerCPU: x.steady.brokerCPU, PeakRSSMB: x.peakRSSMB,
		P50: x.lat.p50, P99: x.lat.p99, P999: x.lat.p999, LatencySamples: x.lat.samples, Check: v(x.check), LiveCheck: v(x.liveCheck),
		Finished: time.Now()}
}

func (r runRecord) run() run {
	v := func(v verdictRecord) verdict {
		return verdict{records: v.Records, wrong: v.Wrong, repeated: v.Repeated, example: v.Example}
	}
	return run{rep: r.Rep, seq: r.Seq, config: r.Config, engine: r.Engine, topology: r.Topology, guarantee: r.Guarantee,
		seconds: r.Seconds, recordsPerSec: r.RecordsPerSec, moved: moved{r.Moved[0], r.Moved[1], r.Moved[2]},
		steady: steady{ok: r.SteadyOK, seconds: r.SteadySeconds, moved: moved{r.SteadyMoved[0], r.SteadyMoved[1], r.SteadyMoved[2]},
			cpu: r.SteadyCPU, brokerCPU: r.SteadyBrokerCPU},
		peakRSSMB: r.PeakRSSMB, lat: latencies{p50: r.P50, p99: r.P99, p999: r.P999, samples: r.LatencySamples},
		check: v(r.Check), liveCheck: v(r.LiveCheck)}
}

// phasesKey is the phases' place among the configurations when parts are
// merged.
const phasesKey = "phases"

// resultsWriter appends to the results file; nil writes nothing.
type resultsWriter struct{ f *os.File }

func openResults(path string, c benchConfig, rep *report) (*resultsWriter, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	w := &resultsWriter{f: f}
	h := resultsHeader{Header: true, Started: rep.started, Args: os.Args[1:], Revision: rep.revision, Records: c.records, Keys: c.keys, Partitions: c.partitions,
		ValueSize: c.valueSize, Setup: setupOf(c), Pin: rep.pin.note, BrokerPID: rep.pin.brokerPID, BrokerWhy: rep.pin.brokerFound, BrokerJVM: rep.brokerJVM}
	return w, w.write(h)
}

func (w *resultsWriter) write(v any) error {
	if w == nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.f.Write(append(b, '\n'))
	return err
}

func (w *resultsWriter) close() error {
	if w == nil {
		return nil
	}
	return w.f.Close()
}

// merge reads results files into one report, as if one run had made them.
// A file's repetitions keep their numbers (-first-rep) unless an earlier
// file has one of them in the same configuration; then they are numbered
// on after the earlier files'. The input and setup must be the same in
// every file; c gets them, the number of repetitions, and the
// configurations present.
func merge(paths []string, c *benchConfig) (*report, error) {
	rep := &report{pin: &pinning{}}
	var took time.Duration
	type configRep struct {
		config string
		rep    int
	}
	used := map[configRep]bool{}
	latencyReps := map[configRep]bool{}
	configs := map[string]bool{}
	for i, path := range paths {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var h resultsHeader
		var runs []run
		var phases []phaseRun
		var last time.Time
		for n := 1; sc.Scan(); n++ {
			if n == 1 {
				if err := json.Unmarshal(sc.Bytes(), &h); err != nil || !h.Header {
					f.Close()
					return nil, fmt.Errorf("%s: no results header on line 1 (%v)", path, err)
				}
				if i == 0 {
					c.records, c.keys, c.partitions, c.valueSize = h.Records, h.Keys, h.Partitions, h.ValueSize
					h.Setup.apply(c)
					rep.started = h.Started
					rep.pin = &pinning{note: h.Pin, brokerPID: h.BrokerPID, brokerFound: h.BrokerWhy}
					rep.brokerJVM = h.BrokerJVM
				} else if h.Records != c.records || h.Keys != c.keys || h.Partitions != c.partitions || h.ValueSize != c.valueSize ||
					!reflect.DeepEqual(h.Setup, setupOf(*c)) {
					f.Close()
					return nil, fmt.Errorf("%s: a run of another input or setup (%d records, %d keys, %d partitions, %d-byte values, %+v) than %s's",
						path, h.Records, h.Keys, h.Partitions, h.ValueSize, h.Setup, paths[0])
				}
				rep.merged = append(rep.merged, fmt.Sprintf("%s (`go run ./bench %s`, %s, at %s)", path, shellArgs(h.Args), h.Started.UTC().Format(time.RFC3339), cmp.Or(h.Revision, "an unrecorded commit")))
				last = h.Started
				continue
			}
			var probe struct{ Phase string }
			if err := json.Unmarshal(sc.Bytes(), &probe); err != nil {
				f.Close()
				return nil, fmt.Errorf("%s:%d: %w", path, n, err)
			}
			if probe.Phase != "" {
				var p phaseLine
				if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
					f.Close()
					return nil, fmt.Errorf("%s:%d: %w", path, n, err)
				}
				phases = append(phases, p.Run)
				last = p.Finished
				continue
			}
			var r runRecord
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				f.Close()
				return nil, fmt.Errorf("%s:%d: %w", path, n, err)
			}
			runs = append(runs, r.run())
			last = r.Finished
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		took += last.Sub(h.Started)
		// The phases count as a configuration of their own.
		keys := make([]configRep, 0, len(runs)+len(phases))
		for _, x := range runs {
			keys = append(keys, configRep{x.config, x.rep})
		}
		for _, p := range phases {
			keys = append(keys, configRep{phasesKey, p.Rep})
		}
		shift, top := 0, -1
		for k := range used {
			top = max(top, k.rep)
		}
		for _, k := range keys {
			if used[k] {
				shift = top + 1 - slices.MinFunc(keys, func(a, b configRep) int { return a.rep - b.rep }).rep
				break
			}
		}
		for _, p := range phases {
			p.Rep += shift
			used[configRep{phasesKey, p.Rep}] = true
			if p.Wrong > 0 {
				rep.mismatches = append(rep.mismatches, phaseMismatch(p))
			}
			rep.phases = append(rep.phases, p)
		}
		for _, x := range runs {
			x.rep += shift
			used[configRep{x.config, x.rep}] = true
			if x.lat.samples > 0 {
				latencyReps[configRep{x.config, x.rep}] = true
			}
			configs[x.config] = true
			if x.check.wrong > 0 {
				rep.mismatches = append(rep.mismatches, mismatch(x, "", x.check))
			}
			if x.liveCheck.wrong > 0 {
				rep.mismatches = append(rep.mismatches, mismatch(x, "latency phase", x.liveCheck))
			}
			rep.runs = append(rep.runs, x)
		}
	}
	rep.finished = rep.started.Add(took)
	// The repetitions and those with latency phases, of the configuration
	// that has most.
	perConfig, latPerConfig := map[string]int{}, map[string]int{}
	for k := range used {
		perConfig[k.config]++
	}
	for k := range latencyReps {
		latPerConfig[k.config]++
	}
	c.reps, c.latencyReps = 1, 0
	for cfg, n := range perConfig {
		c.reps, c.latencyReps = max(c.reps, n), max(c.latencyReps, latPerConfig[cfg])
	}
	c.configs = nil
	for _, cfg := range []engineConfig{defaultsConfig(), c.tuned} {
		if configs[cfg.name] {
			c.configs = append(c.configs, cfg)
		}
	}
	c.configName = "both"
	if len(c.configs) == 1 {
		c.configName = c.configs[0].name
	}
	slices.SortStableFunc(rep.runs, func(a, b run) int { return a.rep - b.rep })
	slices.SortStableFunc(rep.phases, func(a, b phaseRun) int { return a.Rep - b.Rep })
	return rep, nil
}

func shellArgs(args []string) string {
	s := ""
	for i, a := range args {
		if i > 0 {
			s += " "
		}
		if a == "" {
			a = `""`
		}
		s += a
	}
	return s
}
