package engine_test

import (
	"context"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/internal/await"
)

// Under exactly-once a task whose changelog holds an open transaction (a
// crashed owner's, until the broker aborts it) waits for it to end before
// it restores and processes; the instance's other tasks go on meanwhile.
// They did not: the wait held the whole loop, saying nothing, with the
// instance's own transaction open, which the broker aborted when the wait
// outlived TransactionTimeout; the instance then failed when it was stopped
// (a churn campaign, in CI: INVALID_PRODUCER_EPOCH).
func TestAppExactlyOnceOpenChangelogTransactionHoldsOnlyItsTask(t *testing.T) {
	k := newKT(t)
	in, out := k.topic("in"), k.topic("out")
	k.create(2, in, out)
	changelog := engine.NamesOf(engine.Config{AppID: k.prefix}).ChangelogTopic("counts")
	k.create(2, changelog)
	// The transaction a crashed owner of task 0_1 left open on its
	// changelog; the broker would abort it after its timeout.
	zombie, err := kgo.NewClient(kgo.SeedBrokers(k.env.Brokers...), kgo.TransactionalID(k.prefix+"-zombie"),
		kgo.TransactionTimeout(10*time.Minute), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer zombie.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := zombie.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := zombie.ProduceSync(ctx, &kgo.Record{Topic: changelog, Partition: 1, Key: []byte("k000"), Value: []byte{0, 0, 0, 0, 0, 0, 3, 232}}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	recs := keyed(0, 200, 20)
	k.produce(in, recs...)
	want := wantCounts(200, 20)
	held := map[string]int64{} // the counts of task 0_1, which waits
	for key := range want {
		if kafkaPartition([]byte(key), 2) == 1 {
			held[key] = want[key]
			delete(want, key)
		}
	}
	if len(want) == 0 || len(held) == 0 {
		t.Fatalf("the keys fall in one partition: %v, %v", want, held)
	}
	a := k.start(countByKey(in, out), engine.Config{Guarantee: engine.ExactlyOnce, InstanceID: "one"})
	t.Cleanup(func() { _ = zombie.EndTransaction(context.Background(), kgo.TryAbort) }) // before the instance stops
	got := k.table(out, 60*time.Second, func(m map[string]int64) bool {
		for key, n := range want {
			if m[key] != n {
				return false
			}
		}
		return true
	})
	for key := range held {
		if _, ok := got[key]; ok {
			t.Fatalf("key %s of task 0_1 counted while its changelog held an open transaction: %v", key, got)
		}
	}
	if s := a.State(); s != engine.AppRestoring {
		t.Fatalf("state %v while task 0_1 waits to restore; want %v", s, engine.AppRestoring)
	}

	// The zombie's transaction ends: task 0_1 restores (nothing: the
	// transaction was aborted) and counts its keys.
	if err := zombie.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	maps.Copy(want, held)
	k.table(out, 60*time.Second, func(m map[string]int64) bool { return maps.Equal(m, want) })
}

// A stop whose last commit Kafka refuses, because the broker aborted the
// instance's transaction and bumped its producer's epoch, is a clean stop,
// as in Kafka Streams: the next owner of the tasks processes their records
// again, exactly once. It failed the instance before. (The broker does
// that to a transaction that outlives TransactionTimeout, or when a
// producer with the same transactional id starts; the second is what the
// test does, while a step holds the loop.)
func TestAppExactlyOnceStopAfterTheBrokerAbortedTheTransaction(t *testing.T) {
	k := newKT(t)
	in, out := k.topic("in"), k.topic("out")
	k.create(1, in, out)
	reached, gate := make(chan struct{}), make(chan struct{})
	b := engine.NewBuilder()
	engine.NewStream(b, in, serde.String, serde.String).Peek(func(_, v string) {
		if v != "hold" {
			return
		}
		select {
		case <-gate: // opened: the second instance goes through
		default:
			close(reached)
			<-gate
		}
	}).GroupByKey().Count(engine.Materialized("counts")).ToStream().To(out)
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	cfg := engine.Config{AppID: k.prefix, Brokers: k.env.Brokers, StateDir: t.TempDir(), Guarantee: engine.ExactlyOnce,
		InstanceID: "one", CommitInterval: time.Minute, TransactionTimeout: 5 * time.Minute}
	first, err := engine.NewApp(top, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- first.Run(ctx) }()
	open := sync.OnceFunc(func() { close(gate) })
	stopped := sync.OnceValue(func() error { return <-done })
	defer func() { stop(); open(); _ = stopped() }()

	recs := keyed(0, 100, 10)
	recs = append(recs, &kgo.Record{Key: []byte("k000"), Value: []byte("hold")})
	k.produce(in, recs...)
	await.Until(t, 60*time.Second, "the step to hold the records", func() bool {
		select {
		case <-reached:
			return true
		default:
			return false
		}
	})
	// A producer with the instance's transactional id: the broker aborts
	// the open transaction and bumps the epoch.
	txnID := engine.NamesOf(cfg).Group() + "-" + cfg.InstanceID
	fctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	await.NoError(t, 30*time.Second, "a producer with the instance's transactional id", func() error {
		req := kmsg.NewPtrInitProducerIDRequest()
		req.TransactionalID = &txnID
		req.TransactionTimeoutMillis = 60000
		req.ProducerID, req.ProducerEpoch = -1, -1
		resp, err := req.RequestWith(fctx, k.cl)
		if err != nil {
			return err
		}
		return kerr.ErrorForCode(resp.ErrorCode) // CONCURRENT_TRANSACTIONS while the abort completes
	})
	// Stop, then let the step go: the loop commits at the stop.
	stop()
	open()
	if err := stopped(); err != nil {
		t.Fatalf("stopped with %v; want a clean stop", err)
	}

	second := k.start(top, engine.Config{Guarantee: engine.ExactlyOnce, InstanceID: "one"})
	waitRunning(t, k, second)
	want := wantCounts(100, 10)
	want["k000"]++
	k.table(out, 60*time.Second, func(m map[string]int64) bool { return maps.Equal(m, want) })
}
