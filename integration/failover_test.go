package integration

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/internal/await"
)

var failoverKeys = flag.Int("oxbow.failover.keys", 0, "keys of state in the failover test (default 1M; 100k under the race detector)")

// failoverTopology materializes its input, one partition of it per task,
// in the persistent store "kv".
func failoverTopology(in string) *engine.Topology {
	b := engine.NewBuilder()
	engine.NewStream(b, in, serde.String, serde.String).ToTable(engine.Materialized("kv"))
	top, err := b.Build()
	if err != nil {
		panic(err)
	}
	return top
}

// A task with a million keys of state fails over to its standby when its
// active instance is killed: the standby's instance restores only the
// records its copy had not applied, not the million, and answers for every
// key, the updates written just before the kill included.
func TestFailoverToStandby(t *testing.T) {
	env := kafkaenv.Real(t)
	if testing.Short() {
		t.Skip("loads a million keys; not with -short")
	}
	n := *failoverKeys
	if n == 0 {
		n = 1_000_000
		if raceDetector {
			// Loading a million keys under the race detector takes
			// minutes; CI runs this test at full size without it too.
			n = 100_000
		}
	}
	t.Logf("%d keys", n)
	c := newFailoverTopic(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...), kgo.DefaultProduceTopic(c.in), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	produce := func(from, to int, value string) { produceKeys(ctx, t, cl, "k%07d", from, to, value) }
	start := time.Now()
	produce(0, n, "v1")
	t.Logf("%d keys written in %v", n, time.Since(start).Round(time.Millisecond))

	// A, in a child process, processes them all.
	a := startCrashChild(t, c)
	t.Cleanup(func() { a.kill(t) })
	select {
	case <-a.ready:
	case <-a.exited:
		t.Fatalf("A exited before it was ready:\n%s", a.output())
	case <-time.After(2 * time.Minute):
		t.Fatalf("A not ready after 2m:\n%s", a.output())
	}
	adm := kadm.NewClient(cl)
	await.Until(t, 5*time.Minute, "A to commit every input record", func() bool {
		select {
		case <-a.exited:
			t.Fatalf("A exited:\n%s", a.output())
		default:
		}
		return committedInput(ctx, t, adm, c) == int64(n)
	})
	t.Logf("A processed %d records in %v", n, time.Since(start).Round(time.Millisecond))

	// B joins: the task stays active on A, B keeps its standby.
	bc := c
	bc.id, bc.stateDir = "b", t.TempDir()
	cfg := bc.engineConfig()
	b, err := engine.NewApp(failoverTopology(c.in), cfg)
	if err != nil {
		t.Fatal(err)
	}
	bdone := make(chan error, 1)
	go func() { bdone <- b.Run(context.Background()) }()
	t.Cleanup(func() { _ = b.Close() })
	checkB := func() {
		select {
		case err := <-bdone:
			t.Fatalf("B stopped: %v", err)
		default:
		}
	}
	await.Until(t, 5*time.Minute, "B's standby to catch up", func() bool {
		checkB()
		lag, ok := b.StandbyLag()["0_0"]
		return ok && lag == 0 && b.StandbyRecords() >= int64(n)
	})
	if len(b.Tasks()) != 0 {
		t.Fatalf("B runs %v active: the task should have stayed on A", b.Tasks())
	}
	t.Logf("B's standby applied %d records", b.StandbyRecords())

	// Updates just before the kill: B's standby may or may not have them.
	const updates = 1000
	produce(0, updates, "v2")
	await.Until(t, time.Minute, "A to commit the updates", func() bool {
		return committedInput(ctx, t, adm, c) == int64(n+updates)
	})
	killRunning(t, a, "A")
	killed := time.Now()

	await.Until(t, time.Minute, "B to take the task over and restore it", func() bool {
		checkB()
		if len(b.Tasks()) != 1 {
			return false
		}
		s, err := engine.QueryKeyValueStore(b, "kv", serde.String, serde.String)
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = s.Get("k0000000")
		return !errors.Is(err, engine.ErrNotReady)
	})
	restored := b.RestoredRecords()
	t.Logf("B took over %v after the kill, restoring %d records", time.Since(killed).Round(time.Millisecond), restored)
	if restored > updates+int64(n)/100 {
		t.Errorf("B restored %d records on failover: its standby did not spare it the full restore of %d", restored, n)
	}
	s, err := engine.QueryKeyValueStore(b, "kv", serde.String, serde.String)
	if err != nil {
		t.Fatal(err)
	}
	// Every key, with its latest value: the updates that reached the
	// standby and those restored after the kill alike.
	count, wrong := 0, 0
	for kv, err := range s.All() {
		if err != nil {
			t.Fatal(err)
		}
		i, err := strconv.Atoi(strings.TrimPrefix(kv.Key, "k"))
		want := "v1"
		if i < updates {
			want = "v2"
		}
		if err != nil || i >= n || kv.Value != want {
			if wrong++; wrong <= 10 {
				t.Errorf("key %s: %q; want %q", kv.Key, kv.Value, want)
			}
		}
		count++
	}
	if count != n || wrong > 0 {
		t.Errorf("B's store has %d keys (%d wrong), want %d", count, wrong, n)
	}
}

func newFailoverTopic(t *testing.T, env *kafkaenv.Env) crashConfig {
	t.Helper()
	c := newCrashTopicsN(t, env, "failover", 1)
	c.table, c.standbys, c.eos = true, 1, true
	return c
}

// produceKeys writes keys fmt.Sprintf(format, i) for i in [from, to), each
// with value, through cl (its default topic), and fails the test if any is
// not acknowledged.
func produceKeys(ctx context.Context, t *testing.T, cl *kgo.Client, format string, from, to int, value string) {
	t.Helper()
	var mu sync.Mutex
	var first error
	for i := from; i < to; i++ {
		cl.Produce(ctx, &kgo.Record{Key: fmt.Appendf(nil, format, i), Value: []byte(value)}, func(_ *kgo.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil && first == nil {
				first = err
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if first != nil {
		t.Fatal(first)
	}
}
