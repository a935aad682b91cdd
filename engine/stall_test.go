package engine_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/hanging"
	"github.com/oxbow-dev/oxbow/engine/hanging/hangingtest"
	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
	"github.com/oxbow-dev/oxbow/internal/await"
	"github.com/oxbow-dev/oxbow/internal/faultkafka"
)

// newSyncLog is a log for an instance, shown if the test fails.
func newSyncLog(t *testing.T) *syncLog {
	l := &syncLog{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the instance's log:\n%s", l.String())
		}
	})
	return l
}

// syncLog is a log an instance writes while the test reads it.
type syncLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// startOnHanging starts a count by key under exactly-once, with cfg and a
// log of its own, on an input whose partition 0 begins with a transaction
// Kafka left open (hangInput). want is what it counts once the
// transaction is committed there.
func startOnHanging(t *testing.T, cfg engine.Config) (k *kt, in, out string, want map[string]int64, a *app, logs *syncLog) {
	t.Helper()
	kafkaenv.Real(t)
	k = newKT(t)
	in, out = k.topic("in"), k.topic("out")
	k.create(1, in, out)
	want = hangInput(t, k, in)
	logs = newSyncLog(t)
	cfg.Guarantee, cfg.Logger = engine.ExactlyOnce, slog.New(slog.NewTextHandler(logs, nil))
	return k, in, out, want, k.start(countByKey(in, out), cfg), logs
}

// hangInput leaves a transaction open on partition 0 of in, whose
// coordinator committed it (its marker went to another topic's partition
// only), and writes records after it. It returns the counts a count by key
// over in ends with once the transaction is committed there.
func hangInput(t *testing.T, k *kt, in string) map[string]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hangingtest.VerificationOff(ctx, t, k.adm)
	side := k.topic("side")
	k.create(1, side)
	raw, err := hangingtest.Client(k.env.Brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	// key and value k001
	hangingtest.LeaveOpen(ctx, t, raw, k.prefix+"-writer", hangingtest.Partition{Topic: side}, hangingtest.Partition{Topic: in}, "k001", true)
	k.produce(in, keyed(0, 20, 5)...)
	want := wantCounts(20, 5)
	want["k001"]++
	return want
}

// An instance under exactly-once whose input holds a transaction Kafka
// left open makes no progress: with LeaveHangingTransactions it says so,
// in its log (ERROR, with the partition, producer and remedy), its gauge
// and Stalled, once its partition has polled nothing for 10s; once an
// operator repairs the transaction it goes on, and says that it does.
func TestAppReportsHangingTransaction(t *testing.T) {
	t.Parallel() // each waits out the default look: together
	tm := newTelMetrics(t)
	k, in, out, want, a, logs := startOnHanging(t, engine.Config{LeaveHangingTransactions: true, MeterProvider: tm.mp})
	start := time.Now()
	await.Until(t, 90*time.Second, "the instance to say it is stalled", func() bool { return a.Stalled() != nil })
	t.Logf("stalled after %v: %v", time.Since(start).Round(time.Second), a.Stalled())
	if msg := a.Stalled().Error(); !strings.Contains(msg, in+"[0] open since offset 0") || !strings.Contains(msg, "commit: its coordinator decided to commit") || !strings.Contains(msg, "remedy: oxbow transactions repair --topic "+in) {
		t.Fatalf("Stalled: %v", msg)
	}
	if hs := a.Hanging(); len(hs) != 1 || hs[0].Topic != in || hs[0].Partition != 0 || hs[0].Decision != hanging.Commit || hs[0].TxnID != k.prefix+"-writer" {
		t.Fatalf("Hanging: %v", hs)
	}
	log := logs.String()
	for _, s := range []string{"level=ERROR", `msg="a transaction Kafka left open stops this instance"`, "topic=" + in, "partition=0", "transactional_id=" + k.prefix + "-writer",
		"coordinator_state=CompleteCommit", "decision=commit", `repair="off (engine.Config.LeaveHangingTransactions)"`, "remedy="} {
		if !strings.Contains(log, s) {
			t.Fatalf("the log has no %s:\n%s", s, log)
		}
	}
	if g := telInt64s(tm.collect(), "oxbow.kafka.hanging_transactions"); g[""] != 1 {
		t.Fatalf("oxbow.kafka.hanging_transactions: %v", g)
	}
	if n := k.end(out, 0); n != 0 {
		t.Fatalf("%d records out while the input's first transaction was open", n)
	}

	// The operator repairs it (oxbow transactions repair).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.env.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	found, err := hanging.Find(ctx, cl, in)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hanging.Repair(ctx, cl, found); err != nil {
		t.Fatal(err)
	}
	k.table(out, 60*time.Second, func(m map[string]int64) bool { return maps.Equal(m, want) })
	await.Until(t, 30*time.Second, "Stalled to clear", func() bool { return a.Stalled() == nil })
	if g := telInt64s(tm.collect(), "oxbow.kafka.hanging_transactions"); g[""] != 0 {
		t.Fatalf("oxbow.kafka.hanging_transactions after the repair: %v", g)
	}
	if !strings.Contains(logs.String(), "processing again after a transaction left open") {
		t.Fatalf("no word of processing again:\n%s", logs.String())
	}
}

// By default the instance repairs such a transaction itself, with the
// marker its coordinator decided, and goes on.
func TestAppRepairsHangingTransaction(t *testing.T) {
	t.Parallel() // each waits out the default look: together
	k, in, out, want, a, logs := startOnHanging(t, engine.Config{})
	start := time.Now()
	k.table(out, 90*time.Second, func(m map[string]int64) bool { return maps.Equal(m, want) })
	t.Logf("repaired and counted after %v", time.Since(start).Round(time.Second))
	log := logs.String()
	for _, s := range []string{"level=WARN", `msg="repaired a transaction Kafka left open: wrote the marker its coordinator decided"`, "topic=" + in, "decision=commit"} {
		if !strings.Contains(log, s) {
			t.Fatalf("the log has no %s:\n%s", s, log)
		}
	}
	if strings.Contains(log, "level=ERROR") {
		t.Fatalf("an error logged:\n%s", log)
	}
	if err := a.Stalled(); err != nil {
		t.Fatalf("Stalled after the repair: %v", err)
	}
}

// offsetsInTxn makes, on kafka-solo, an input in of 20 records and a
// transaction of version 1 (timing out after timeoutMillis) that writes to
// a side topic and commits the group's offset 10 of in without adding the
// group's offsets to it: until it ends, the group's offsets there are
// unstable; once it ends, they are left so. Every group whose offsets
// share that partition of __consumer_offsets waits meanwhile, so the test
// holds the broker alone while it runs. ctx ends with the test.
func offsetsInTxn(t *testing.T, timeoutMillis int32) (ctx context.Context, k *kt, in, out string, p *hangingtest.Producer) {
	t.Helper()
	k = newKTOn(t, faultkafka.Get(t, "solo", 1).Env)
	in, out = k.topic("in"), k.topic("out")
	side := k.topic("side")
	k.create(1, in, out, side)
	k.produce(in, keyed(0, 20, 5)...)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	hangingtest.VerificationOff(ctx, t, k.adm)
	raw, err := hangingtest.Client(k.env.Brokers)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(raw.Close)
	p = hangingtest.Init(ctx, t, raw, k.prefix+"-offsets", timeoutMillis)
	p.Add(ctx, t, side, 0)
	p.Produce(ctx, t, side, 0, "s")
	group := engine.NamesOf(engine.Config{AppID: k.prefix}).Group()
	p.CommitOffset(ctx, t, group, in, 0, 10) // the first 10 records count as processed
	return ctx, k, in, out, p
}

// A transaction Kafka left open on the group's partition of
// __consumer_offsets (a transactional offset commit whose marker was
// dropped) keeps every member from starting: franz-go retries
// UNSTABLE_OFFSET_COMMIT without end. The instance finds it and commits
// it, as its coordinator decided; it then starts from that offset.
//
// Every group whose offsets share that partition waits meanwhile, so the
// test runs on the fault campaigns' own broker (kafka-solo), which it
// holds alone while it runs.
func TestAppRepairsHangingOffsets(t *testing.T) {
	ctx, k, in, out, p := offsetsInTxn(t, 60_000)
	p.End(ctx, t, true)

	logs := newSyncLog(t)
	k.start(countByKey(in, out), engine.Config{Guarantee: engine.ExactlyOnce, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	start := time.Now()
	want := map[string]int64{"k000": 2, "k001": 2, "k002": 2, "k003": 2, "k004": 2}
	k.table(out, 90*time.Second, func(m map[string]int64) bool { return maps.Equal(m, want) })
	t.Logf("repaired and counted after %v", time.Since(start).Round(time.Second))
	if log := logs.String(); !strings.Contains(log, `msg="repaired a transaction Kafka left open: wrote the marker its coordinator decided" group=`) ||
		!strings.Contains(log, "topic=__consumer_offsets") || !strings.Contains(log, "decision=commit") {
		t.Fatalf("the log says nothing of the repair on __consumer_offsets:\n%s", log)
	}
}

// A transaction in progress that holds an offset commit of the group
// keeps the group's offsets unstable, and every member from starting on
// them; its coordinator has it in progress, so it is not left open, and
// the watcher leaves it alone. But the wait is not silent: past the bound
// the instance says at WARN what it waits on, and Stuck (readiness) names
// the partitions. When the transaction ends without a marker on the
// offsets (its commit never added them), it is left open: repaired, and
// the instance counts.
func TestAppSaysOffsetsUnstable(t *testing.T) {
	ctx, k, in, out, p := offsetsInTxn(t, 5*60_000) // in progress for five minutes

	logs := newSyncLog(t)
	a := k.start(countByKey(in, out), engine.Config{Guarantee: engine.ExactlyOnce, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	await.Until(t, 2*time.Minute, "the instance to say what it waits on", func() bool {
		return strings.Contains(logs.String(), "level=WARN msg=\"no progress, and no transaction left open found")
	})
	if log := logs.String(); !strings.Contains(log, in+"[0] unread: the group's offset there is unstable") {
		t.Errorf("the WARN does not name the partition and the unstable offsets:\n%s", log)
	}
	await.Until(t, 30*time.Second, "Stuck to say so", func() bool { return a.Stuck() != nil })
	if err := a.Stuck(); !strings.Contains(err.Error(), "offsets have been unstable") || !strings.Contains(err.Error(), in+"[0]") {
		t.Errorf("Stuck: %v", err)
	}
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "repaired") && strings.Contains(l, "transactional_id="+p.TxnID+" ") {
			t.Fatalf("a transaction its coordinator has in progress was repaired: %s", l)
		}
	}

	p.End(ctx, t, true) // no marker on the offsets: now left open
	want := map[string]int64{"k000": 2, "k001": 2, "k002": 2, "k003": 2, "k004": 2}
	k.table(out, 90*time.Second, func(m map[string]int64) bool { return maps.Equal(m, want) })
	await.Until(t, 30*time.Second, "Stuck to clear", func() bool { return a.Stuck() == nil })
}

// An instance restarted on input read to its end but for an aborted
// transaction, which its group's offset stays before, has nothing to
// wait for: its watcher finds that no record waits there and looks for
// no transaction left open (a look costs requests to every broker, every
// few seconds while it lasts).
func TestAppIdleAfterRestartLooksForNothing(t *testing.T) {
	t.Parallel() // waits out the default look, like the tests above
	kafkaenv.Real(t)
	k := newKT(t)
	in, out := k.topic("in"), k.topic("out")
	k.create(1, in, out)
	k.produce(in, keyed(0, 20, 5)...)
	want := wantCounts(20, 5)
	first := k.start(countByKey(in, out), engine.Config{Guarantee: engine.ExactlyOnce})
	k.table(out, time.Minute, func(m map[string]int64) bool { return maps.Equal(m, want) })
	if err := first.stop(); err != nil {
		t.Fatal(err)
	}
	// Then an aborted transaction: records no reader gets, and its marker.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := kgo.NewClient(kgo.SeedBrokers(k.env.Brokers...), kgo.TransactionalID(k.prefix+"-writer"), kgo.DefaultProduceTopic(in))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := w.ProduceSync(ctx, keyed(20, 10, 5)...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := w.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}

	logs := newSyncLog(t)
	k.start(countByKey(in, out), engine.Config{Guarantee: engine.ExactlyOnce, Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	await.Until(t, time.Minute, "the watcher to find that nothing waits", func() bool {
		return strings.Contains(logs.String(), "no record waits on them")
	})
	if log := logs.String(); strings.Contains(log, "looking for transactions") {
		t.Fatalf("the idle instance looked for transactions left open:\n%s", log)
	}
}

// An instance whose broker stops answering in the middle of its commits
// says at WARN, once it has waited 5s, what it waits for, and at INFO
// when the wait ends; then it goes on, exactly. (The broker is kafka-solo,
// held alone: it is SIGSTOPped until the WARN.)
func TestAppSaysWhatItWaitsFor(t *testing.T) {
	kc := faultkafka.Get(t, "solo", 1)
	k := newKTOn(t, kc.Env)
	in, out := k.topic("in"), k.topic("out")
	k.create(1, in, out)
	logs := newSyncLog(t)
	k.start(countByKey(in, out), engine.Config{Guarantee: engine.ExactlyOnce, Logger: slog.New(slog.NewTextHandler(logs, nil))})

	// Records keep coming, so that a transaction is open, or about to
	// commit, when the broker stops.
	ctx, cancel := context.WithCancel(context.Background())
	var fed atomic.Int64
	var feeder sync.WaitGroup
	feeder.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			if err := k.cl.ProduceSync(ctx, &kgo.Record{Topic: in, Key: fmt.Appendf(nil, "k%03d", i%5), Value: []byte("v")}).FirstErr(); err == nil {
				fed.Add(1)
			} else if ctx.Err() == nil {
				t.Errorf("feeding: %v", err)
				return
			}
			time.Sleep(5 * time.Millisecond) // about 200 records a second
		}
	})
	stopFeeding := func() { cancel(); feeder.Wait() }
	defer stopFeeding()
	k.table(out, time.Minute, func(m map[string]int64) bool { return m["k000"] > 0 })
	await.Until(t, time.Minute, "records to be fed", func() bool { return fed.Load() > 100 })

	kc.Node(t, 1, "pause")
	await.Until(t, time.Minute, "a WARN of what the instance waits for", func() bool {
		return strings.Contains(logs.String(), `level=WARN msg="waiting on Kafka"`)
	})
	kc.Node(t, 1, "resume")
	await.Until(t, 2*time.Minute, "the end of the wait, said", func() bool {
		return strings.Contains(logs.String(), `msg="done waiting on Kafka"`)
	})
	stopFeeding()
	want := map[string]int64{}
	for i := range fed.Load() {
		want[fmt.Sprintf("k%03d", i%5)]++
	}
	k.table(out, 2*time.Minute, func(m map[string]int64) bool { return maps.Equal(m, want) })
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "waiting on Kafka") {
			t.Logf("the instance: %s", l)
		}
	}
}

// An idle instance that Kafka stops answering (its broker SIGSTOPped: the
// connections stay, the requests wait) fails nothing, but it cannot read
// what is written meanwhile: it says so at WARN, and Stalled (readiness)
// names Kafka out of its reach, until the broker answers again.
func TestAppOutOfReach(t *testing.T) {
	kc := faultkafka.Get(t, "solo", 1)
	k := newKTOn(t, kc.Env)
	in, out := k.topic("in"), k.topic("out")
	k.create(1, in, out)
	logs := newSyncLog(t)
	// The default session (kt.start's is shorter): with a short one the
	// group's heartbeat fails first, and the instance is Degraded instead.
	a := k.start(countByKey(in, out), engine.Config{Guarantee: engine.ExactlyOnce, SessionTimeout: 45 * time.Second,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	k.produce(in, &kgo.Record{Topic: in, Key: []byte("k"), Value: []byte("v")})
	k.table(out, time.Minute, func(m map[string]int64) bool { return m["k"] == 1 })
	if err := a.Stalled(); err != nil {
		t.Fatalf("Stalled before the fault: %v", err)
	}

	kc.Node(t, 1, "pause")
	paused := time.Now()
	await.Until(t, time.Minute, "Stalled to name Kafka out of reach", func() bool {
		err := a.Stalled()
		return err != nil && strings.Contains(err.Error(), "Kafka is out of its reach")
	})
	t.Logf("out of reach %v after the pause: %v", time.Since(paused).Round(100*time.Millisecond), a.Stalled())
	await.Until(t, 30*time.Second, "the WARN", func() bool {
		return strings.Contains(logs.String(), `level=WARN msg="Kafka does not answer this instance"`)
	})
	if st := a.State(); st == engine.AppFailed {
		t.Fatalf("the instance failed: %v", a.Trouble())
	}
	kc.Node(t, 1, "resume")
	await.Until(t, time.Minute, "Stalled to clear", func() bool { return a.Stalled() == nil })
	await.Until(t, 30*time.Second, "the INFO", func() bool {
		return strings.Contains(logs.String(), `msg="Kafka answers this instance again"`)
	})
	k.produce(in, &kgo.Record{Topic: in, Key: []byte("k"), Value: []byte("v")})
	k.table(out, time.Minute, func(m map[string]int64) bool { return m["k"] == 2 })
}

// A transaction of the instance's own producer that Kafka left open on a
// partition it writes — its coordinator aborted it, and no marker came
// there — would be ended by the instance's next transaction on that
// partition, with that one's COMMIT: the aborted record would be read as
// committed (the shoe store's broker campaign counted a sale twice so).
// Before it writes, the instance ends it as its coordinator decided.
func TestAppEndsItsOwnTransactionLeftOpen(t *testing.T) {
	t.Parallel()
	kafkaenv.Real(t)
	k := newKT(t)
	in, out, side := k.topic("in"), k.topic("out"), k.topic("side")
	k.create(1, in, out, side)
	k.produce(in, keyed(0, 20, 5)...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hangingtest.VerificationOff(ctx, t, k.adm)
	raw, err := hangingtest.Client(k.env.Brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	cfg := engine.Config{AppID: k.prefix, InstanceID: "i1", Guarantee: engine.ExactlyOnce}
	txnID := engine.NamesOf(cfg).Group() + "-i1"
	// Aborted; left open on out[0], where the instance will write.
	hangingtest.LeaveOpen(ctx, t, raw, txnID, hangingtest.Partition{Topic: side}, hangingtest.Partition{Topic: out}, "ghost", false)

	logs := newSyncLog(t)
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	k.start(countByKey(in, out), cfg)
	// A "ghost" read as committed fails the table's decoding.
	k.table(out, time.Minute, func(m map[string]int64) bool { return maps.Equal(m, wantCounts(20, 5)) })
	log := logs.String()
	for _, s := range []string{`msg="repaired a transaction of this instance's producer Kafka left open, before writing again`, "topic=" + out + " ", "decision=abort"} {
		if !strings.Contains(log, s) {
			t.Fatalf("the log has no %s:\n%s", s, log)
		}
	}
}
