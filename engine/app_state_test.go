package engine_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/internal/state"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/internal/await"
)

// countByKey counts the records of each key into the store "counts".
func countByKey(in, out string) *engine.Topology {
	b := engine.NewBuilder()
	engine.NewStream(b, in, serde.String, serde.String).GroupByKey().
		Count(engine.Materialized("counts")).ToStream().To(out)
	top, err := b.Build()
	if err != nil {
		panic(err)
	}
	return top
}

func keyed(from, n, keys int) []*kgo.Record {
	var recs []*kgo.Record
	for i := from; i < from+n; i++ {
		recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, "k%03d", i%keys), Value: []byte("v")})
	}
	return recs
}

func wantCounts(total, keys int) map[string]int64 {
	m := map[string]int64{}
	for i := range total {
		m[fmt.Sprintf("k%03d", i%keys)]++
	}
	return m
}

// changelogEnd is the sum of the end offsets of a store's changelog.
func (k *kt) changelogEnd(app *engine.App, store string) int64 {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := k.adm.ListEndOffsets(ctx, app.Group()+"-"+store+"-changelog")
	if err != nil {
		k.t.Fatal(err)
	}
	var sum int64
	ends.Each(func(o kadm.ListedOffset) { sum += o.Offset })
	return sum
}

// storeContents reads a store of one instance (the keys it owns).
func storeContents(t *testing.T, a *engine.App, store string) map[string]int64 {
	t.Helper()
	s, err := engine.QueryKeyValueStore(a, store, serde.String, serde.Int64)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]int64{}
	for kv, err := range s.All() {
		if err != nil {
			t.Fatal(err)
		}
		m[kv.Key] = kv.Value
	}
	return m
}

// Local state survives a restart: a clean restart replays nothing, a
// restart after another instance moved the state on replays only what that
// instance wrote, and a restart with the state dir deleted restores the
// whole changelog — each with the same answers.
func TestAppRestoresOnlyTheChangelogTail(t *testing.T) {
	k := newKT(t)
	in, out := k.topic("in"), k.topic("out")
	k.create(2, in, out)
	top := countByKey(in, out)
	const keys = 40
	dirA, dirB := t.TempDir(), t.TempDir()

	// A counts the first 400 records and stops cleanly.
	a := k.start(top, engine.Config{InstanceID: "a", StateDir: dirA})
	k.produce(in, keyed(0, 400, keys)...)
	k.table(out, 60*time.Second, func(m map[string]int64) bool { return maps.Equal(m, wantCounts(400, keys)) })
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	endA := k.changelogEnd(a.App, "counts")

	// A again, same dir: its checkpoint is the changelog's end.
	a = k.start(top, engine.Config{InstanceID: "a", StateDir: dirA})
	waitRunning(t, k, a)
	if n := a.RestoredRecords(); n != 0 {
		t.Errorf("clean restart restored %d records, want 0", n)
	}
	if got := storeContents(t, a.App, "counts"); !maps.Equal(got, wantCounts(400, keys)) {
		t.Errorf("after a clean restart the store holds %v", got)
	}
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}

	// B takes over with a state dir of its own (restoring everything), and
	// counts 200 more.
	b := k.start(top, engine.Config{InstanceID: "b", StateDir: dirB})
	k.produce(in, keyed(400, 200, keys)...)
	k.table(out, 60*time.Second, func(m map[string]int64) bool { return maps.Equal(m, wantCounts(600, keys)) })
	if n := b.RestoredRecords(); n != endA {
		t.Errorf("B, with no local state, restored %d records, want the whole changelog, %d", n, endA)
	}
	if err := b.stop(); err != nil {
		t.Fatal(err)
	}
	endB := k.changelogEnd(b.App, "counts")
	if endB <= endA {
		t.Fatalf("B wrote no changelog records (ends %d, %d)", endA, endB)
	}

	// A comes back: it replays only what B wrote.
	a = k.start(top, engine.Config{InstanceID: "a", StateDir: dirA})
	waitRunning(t, k, a)
	if n := a.RestoredRecords(); n != endB-endA {
		t.Errorf("A restored %d records, want the tail B wrote, %d", n, endB-endA)
	}
	if got := storeContents(t, a.App, "counts"); !maps.Equal(got, wantCounts(600, keys)) {
		t.Errorf("after restoring the tail the store holds %v, want %v", got, wantCounts(600, keys))
	}
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}

	// A with its state dir deleted restores the whole changelog.
	if err := os.RemoveAll(dirA); err != nil {
		t.Fatal(err)
	}
	a = k.start(top, engine.Config{InstanceID: "a", StateDir: dirA})
	waitRunning(t, k, a)
	if n := a.RestoredRecords(); n != endB {
		t.Errorf("A with a deleted state dir restored %d records, want %d", n, endB)
	}
	if got := storeContents(t, a.App, "counts"); !maps.Equal(got, wantCounts(600, keys)) {
		t.Errorf("after a full restore the store holds %v", got)
	}
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
}

// A store the topology no longer has (renamed here; an older Oxbow's
// "-expiry" index of a windowed aggregation, say) leaves the state
// directory when an instance starts with the new topology; the others stay.
func TestAppDropsStoresItNoLongerHas(t *testing.T) {
	k := newKT(t)
	in, out := k.topic("in"), k.topic("out")
	k.create(2, in, out)
	dir := t.TempDir()
	a := k.start(countByKey(in, out), engine.Config{InstanceID: "a", StateDir: dir})
	k.produce(in, keyed(0, 100, 10)...)
	k.table(out, 60*time.Second, func(m map[string]int64) bool { return maps.Equal(m, wantCounts(100, 10)) })
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	stores := func() []string {
		db, err := state.Open(dir, state.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		parts, err := db.Stores()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, sp := range parts {
			if !slices.Contains(names, sp.Store) {
				names = append(names, sp.Store)
			}
		}
		return names
	}
	if got := stores(); !slices.Equal(got, []string{"counts"}) {
		t.Fatalf("stores held after the first run: %v", got)
	}
	b := engine.NewBuilder()
	engine.NewStream(b, in, serde.String, serde.String).GroupByKey().
		Count(engine.Materialized("tallies")).ToStream().To(out)
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	a = k.start(top, engine.Config{InstanceID: "a", StateDir: dir})
	k.produce(in, keyed(100, 50, 10)...)
	// The new store counts from nothing.
	k.table(out, 60*time.Second, func(m map[string]int64) bool { return maps.Equal(m, wantCounts(50, 10)) })
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	if got := stores(); !slices.Equal(got, []string{"tallies"}) {
		t.Errorf("stores held after the renamed store's run: %v, want [tallies]", got)
	}
}

// waitRunning waits until the instance has its tasks and has restored them.
func waitRunning(t *testing.T, k *kt, a *app) {
	t.Helper()
	await.Until(t, 60*time.Second, "instance "+a.ID()+" to run", func() bool {
		k.checkApps()
		return a.State() == engine.AppRunning && len(a.Tasks()) > 0
	})
}

// Scaling from one instance to three and back moves tasks and their state:
// every record is counted once (the instances hand tasks over cleanly), and
// after each rebalance every instance agrees on where each key lives, and
// that instance's store has it.
func TestAppScalesOutAndIn(t *testing.T) {
	k := newKT(t)
	in, out := k.topic("lines"), k.topic("counts")
	k.create(6, in, out)
	top := wordCount(in, out)
	batches := [][]*kgo.Record{genLines(11, 300), genLines(12, 300), genLines(13, 300)}
	upTo := func(n int) map[string]int64 {
		var recs []*kgo.Record
		for _, b := range batches[:n] {
			recs = append(recs, b...)
		}
		return wordCounts(recs)
	}

	a := k.start(top, engine.Config{InstanceID: "a"})
	// Running first, so that a slow start (CI runs the campaigns beside
	// this) fails as such rather than as missing counts.
	waitRunning(t, k, a)
	k.produce(in, batches[0]...)
	k.table(out, 60*time.Second, func(m map[string]int64) bool { return maps.Equal(m, upTo(1)) })

	b := k.start(top, engine.Config{InstanceID: "b"})
	c := k.start(top, engine.Config{InstanceID: "c"})
	apps := []*app{a, b, c}
	waitSpread(t, k, apps, 12)
	k.produce(in, batches[1]...)
	k.table(out, 60*time.Second, func(m map[string]int64) bool { return maps.Equal(m, upTo(2)) })
	checkOwners(t, apps, upTo(2))

	for _, x := range []*app{b, c} {
		if err := x.stop(); err != nil {
			t.Fatal(err)
		}
	}
	waitSpread(t, k, []*app{a}, 12)
	k.produce(in, batches[2]...)
	got := k.table(out, 60*time.Second, func(m map[string]int64) bool { return maps.Equal(m, upTo(3)) })
	if !maps.Equal(got, upTo(3)) {
		t.Fatalf("counts %v, want %v", got, upTo(3))
	}
	checkOwners(t, []*app{a}, upTo(3))
}

// waitSpread waits until the instances share all tasks, each having some.
func waitSpread(t *testing.T, k *kt, apps []*app, tasks int) {
	t.Helper()
	await.Until(t, 90*time.Second, fmt.Sprintf("%d tasks spread over %d instances", tasks, len(apps)), func() bool {
		k.checkApps()
		seen := map[string]bool{}
		for _, a := range apps {
			ts := a.Tasks()
			if len(ts) == 0 || a.State() != engine.AppRunning {
				return false
			}
			for _, id := range ts {
				if seen[id] {
					return false
				}
				seen[id] = true
			}
		}
		return len(seen) == tasks
	})
}

// checkOwners asks every instance where each key lives: they must agree, the
// owner must be one of them, its store must hold the key's count, and the
// others must answer that the key is not theirs.
func checkOwners(t *testing.T, apps []*app, want map[string]int64) {
	t.Helper()
	byID := map[string]*app{}
	for _, a := range apps {
		byID[a.ID()] = a
	}
	for _, w := range slices.Sorted(maps.Keys(want)) {
		var owner string
		for _, a := range apps {
			o, local, err := engine.KeyOwner(a.App, "counts", w, serde.String)
			if err != nil {
				t.Fatalf("instance %s, key %s: %v", a.ID(), w, err)
			}
			if owner == "" {
				owner = o.ID
			} else if o.ID != owner {
				t.Fatalf("key %s: instances disagree on its owner: %s and %s", w, owner, o.ID)
			}
			if local != (o.ID == a.ID()) {
				t.Errorf("key %s: instance %s says local=%v for owner %s", w, a.ID(), local, o.ID)
			}
		}
		host := byID[owner]
		if host == nil {
			t.Fatalf("key %s: owner %q is not running", w, owner)
		}
		await.Until(t, 10*time.Second, "the count of "+w+" in its owner's store", func() bool {
			s, err := engine.QueryKeyValueStore(host.App, "counts", serde.String, serde.Int64)
			if err != nil {
				t.Fatal(err)
			}
			v, ok, err := s.Get(w)
			return err == nil && ok && v == want[w]
		})
	}
}

// A global table holds every partition of its topic on every instance: read
// to its end before the instance is ready, then kept current.
func TestAppGlobalTable(t *testing.T) {
	k := newKT(t)
	in, out, cat := k.topic("in"), k.topic("out"), k.topic("catalog")
	k.create(2, in, out)
	k.create(3, cat)
	price := func(v int64) []byte { b, _ := serde.Int64.Encode(v); return b }
	var recs []*kgo.Record
	for i := range 30 {
		recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, "item-%02d", i), Value: price(int64(i))})
	}
	k.produce(cat, recs...)

	b := engine.NewBuilder()
	g := engine.NewGlobalTable(b, cat, serde.String, serde.Int64, engine.Materialized("catalog"))
	engine.NewStream(b, in, serde.String, serde.String).To(out)
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	apps := []*app{k.start(top, engine.Config{InstanceID: "a"}), k.start(top, engine.Config{InstanceID: "b"})}
	for _, a := range apps {
		waitRunning(t, k, a)
		// Ready means bootstrapped: every item is there at once.
		if got := storeContents(t, a.App, g.StoreName()); len(got) != 30 || got["item-07"] != 7 {
			t.Fatalf("instance %s after bootstrap: %d items, item-07 = %d", a.ID(), len(got), got["item-07"])
		}
	}
	// Updates and deletes reach every instance.
	k.produce(cat, &kgo.Record{Key: []byte("item-07"), Value: price(70)}, &kgo.Record{Key: []byte("item-08")})
	for _, a := range apps {
		await.Until(t, 30*time.Second, "the update on instance "+a.ID(), func() bool {
			got := storeContents(t, a.App, g.StoreName())
			_, has8 := got["item-08"]
			return got["item-07"] == 70 && !has8 && len(got) == 29
		})
	}
}

// A standby replica follows its task's changelog; a query that allows
// stale answers reads it on the standby's instance, one that does not is
// sent to the active instance.
func TestStandbyStaleReads(t *testing.T) {
	k := newKT(t)
	in := k.topic("in")
	k.create(1, in)
	b := engine.NewBuilder()
	engine.NewStream(b, in, serde.String, serde.String).ToTable(engine.Materialized("kv"))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	var recs []*kgo.Record
	for i := range 500 {
		recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, "k%03d", i), Value: fmt.Appendf(nil, "v%d", i)})
	}
	k.produce(in, recs...)
	a := k.start(top, engine.Config{InstanceID: "a", StandbyReplicas: 1})
	await.Until(t, 60*time.Second, "a to run the task", func() bool { k.checkApps(); return len(a.Tasks()) == 1 })
	bb := k.start(top, engine.Config{InstanceID: "b", StandbyReplicas: 1})
	await.Until(t, 60*time.Second, "b's standby to catch up", func() bool {
		k.checkApps()
		lag, ok := bb.StandbyLag()["0_0"]
		return ok && lag == 0 && bb.StandbyRecords() >= 500
	})
	if len(bb.Tasks()) != 0 {
		t.Fatalf("b runs %v active; the task should have stayed on a", bb.Tasks())
	}
	strict, err := engine.QueryKeyValueStore(bb.App, "kv", serde.String, serde.String)
	if err != nil {
		t.Fatal(err)
	}
	var nl *engine.NotLocalError
	if _, _, err := strict.Get("k007"); !errors.As(err, &nl) || nl.Owner.ID != "a" {
		t.Errorf("strict Get on the standby's instance: %v, want a NotLocalError naming a", err)
	}
	stale, err := engine.QueryKeyValueStore(bb.App, "kv", serde.String, serde.String, engine.AllowStale(10))
	if err != nil {
		t.Fatal(err)
	}
	if v, _, err := stale.Get("k007"); err != nil || v != "v7" {
		t.Errorf("stale Get: %q, %v; want v7", v, err)
	}
	n := 0
	for _, err := range stale.All() {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 500 {
		t.Errorf("stale All: %d keys, want 500", n)
	}
	if _, err := engine.QueryKeyValueStore(bb.App, "kv", serde.String, serde.String, engine.AllowStale(-1)); err == nil {
		t.Error("AllowStale(-1) accepted")
	}
}

// With a commit interval of five minutes, the counts held in the record cache
// still come out, and the input offsets are committed, once the input runs
// dry; under exactly-once as well (there only a commit makes them visible).
func TestAppCommitsWhenInputRunsDry(t *testing.T) {
	for name, g := range map[string]engine.Guarantee{"alos": engine.AtLeastOnce, "eos": engine.ExactlyOnce} {
		t.Run(name, func(t *testing.T) { testCommitsWhenInputRunsDry(t, g) })
	}
}

func testCommitsWhenInputRunsDry(t *testing.T, g engine.Guarantee) {
	k := newKT(t)
	in, out := k.topic("in"), k.topic("out")
	k.create(2, in, out)
	a := k.start(countByKey(in, out), engine.Config{Guarantee: g, CommitInterval: 5 * time.Minute, TransactionTimeout: 10 * time.Minute})
	waitRunning(t, k, a)
	for round := 1; round <= 2; round++ {
		k.produce(in, keyed((round-1)*100, 100, 10)...)
		k.table(out, 60*time.Second, func(m map[string]int64) bool { return maps.Equal(m, wantCounts(round*100, 10)) })
		waitInputCommitted(t, k)
	}
}

// waitInputCommitted waits until the group of k's application has
// committed every partition of its inputs to its end, or of the topics
// given. (Name the topics if the group reads topics written in transactions,
// such as repartition topics: the commit marker after their last record is
// never consumed, so their lag stays one.)
func waitInputCommitted(t *testing.T, k *kt, topics ...string) {
	t.Helper()
	await.Until(t, 30*time.Second, "the input offsets committed", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		lag, err := k.adm.Lag(ctx, k.prefix)
		if err != nil || lag.Error() != nil {
			return false
		}
		total := int64(0)
		for _, l := range lag[k.prefix].Lag.Sorted() {
			if len(topics) > 0 && !slices.Contains(topics, l.Topic) {
				continue
			}
			if l.Commit.At < 0 {
				if l.End.Offset == 0 {
					continue // nothing to consume yet
				}
				return false
			}
			total += l.Lag
		}
		return total == 0
	})
}

// Under exactly-once, a rebalance that lands between a poll and its
// records (here an eager one that gives back the same tasks) aborts the
// open transaction, and the session moves every partition back to its
// committed offset: what that poll returned is fetched again, and must not
// also be processed from the old poll. It was, once: a churn campaign found
// keys counted twice.
func TestAppExactlyOnceRevokeBetweenPollAndRecords(t *testing.T) {
	k := newKT(t)
	in, out := k.topic("in"), k.topic("out")
	k.create(2, in, out)
	// Fetches of at most 8 KiB a partition, so that polls with records
	// follow each other inside one transaction (a poll takes what the
	// client has fetched).
	a := k.start(countByKey(in, out), engine.Config{Guarantee: engine.ExactlyOnce, CommitInterval: 5 * time.Second,
		KafkaOptions: []kgo.Opt{kgo.FetchMaxPartitionBytes(8 << 10)}})
	fired := engine.RevokeMidStream(t, a.App)
	waitRunning(t, k, a)
	const n = 12000
	// In produce calls of 300 records, batches of a few KiB each: one
	// batch of all of them would come in one fetch, and one poll.
	for i := 0; i < n; i += 300 {
		k.produce(in, keyed(i, 300, 10)...)
	}
	waitInputCommitted(t, k)
	if !fired() {
		t.Fatal("no poll with records followed another")
	}
	// Everything is committed: read until the counts add up to the input.
	got := k.table(out, 60*time.Second, func(m map[string]int64) bool {
		total := int64(0)
		for _, c := range m {
			total += c
		}
		return total >= n
	})
	if want := wantCounts(n, 10); !maps.Equal(got, want) {
		t.Fatalf("counts %v, want %v", got, want)
	}
}

// Restoring shows each store's restoration while it goes on, by task and
// store, and nothing once the instance runs.
func TestAppRestoring(t *testing.T) {
	k := newKT(t)
	in, out := k.topic("in"), k.topic("out")
	k.create(2, in, out)
	top := countByKey(in, out)
	const n, keys = 60_000, 60_000
	// No cache: every record writes the changelog, which B restores.
	a := k.start(top, engine.Config{InstanceID: "a", CacheBytes: -1})
	k.produce(in, keyed(0, n, keys)...)
	k.table(out, 2*time.Minute, func(m map[string]int64) bool { return len(m) == keys })
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	end := k.changelogEnd(a.App, "counts")

	// Each time B has applied records, what Restoring says then.
	var mu sync.Mutex
	var seen []engine.RestoreProgress
	engine.OnRestored(func(ps []engine.RestoreProgress) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, ps...)
	})
	t.Cleanup(func() { engine.OnRestored(nil) })
	b := k.start(top, engine.Config{InstanceID: "b"})
	waitRunning(t, k, b)
	engine.OnRestored(nil)
	mu.Lock()
	defer mu.Unlock()
	if n := b.RestoredRecords(); n != end {
		t.Fatalf("B restored %d records, want the changelog's %d", n, end)
	}
	// Each store's progress moves on from one reading to the next, and the
	// last reading of each has the changelog's partition restored.
	last := map[string]engine.RestoreProgress{}
	var restored int64
	for _, p := range seen {
		if (p.Task != "0_0" && p.Task != "0_1") || p.Store != "counts" || p.Started.IsZero() {
			t.Errorf("progress %+v: want task 0_0 or 0_1, store counts, a start", p)
		}
		if prev, ok := last[p.Task]; ok && (p.Restored < prev.Restored || p.Remaining > prev.Remaining) {
			t.Errorf("task %s went back from %+v to %+v", p.Task, prev, p)
		}
		last[p.Task] = p
	}
	for task, p := range last {
		if p.Remaining != 0 {
			t.Errorf("task %s's last reading: %d records remaining", task, p.Remaining)
		}
		restored += p.Restored
	}
	if len(last) != 2 || restored != end {
		t.Errorf("the last readings %v: want both tasks', %d records restored in all", last, end)
	}
	if r := b.Restoring(); len(r) != 0 {
		t.Errorf("B runs, and still restores %+v", r)
	}
}

// A partition read to its end is at its end offset, also where a
// transaction's commit marker takes its last offset: written by a
// transactional producer (read exactly once: read committed, the marker
// is known to follow; at least once a record may come before its marker,
// App.Positions says), by a plain one, read at either guarantee.
func TestPositionsReachTheEnd(t *testing.T) {
	for _, g := range guarantees {
		for _, txn := range []bool{true, false} {
			if txn && g.g == engine.AtLeastOnce {
				continue
			}
			t.Run(fmt.Sprintf("%s/transactional-%v", g.name, txn), func(t *testing.T) {
				k := newKT(t)
				in, out := k.topic("in"), k.topic("out")
				k.create(2, in, out)
				a := k.start(countByKey(in, out), engine.Config{Guarantee: g.g})
				waitRunning(t, k, a)
				recs := keyed(0, 30, 7)
				if txn {
					p, err := kgo.NewClient(kgo.SeedBrokers(k.env.Brokers...), kgo.TransactionalID(k.prefix+"-producer"), kgo.DefaultProduceTopic(in))
					if err != nil {
						t.Fatal(err)
					}
					defer p.Close()
					ctx := context.Background()
					// Three transactions, the last one's marker ending each
					// partition.
					for i := 0; i < len(recs); i += 10 {
						if err := p.BeginTransaction(); err != nil {
							t.Fatal(err)
						}
						if err := p.ProduceSync(ctx, recs[i:i+10]...).FirstErr(); err != nil {
							t.Fatal(err)
						}
						if err := p.EndTransaction(ctx, kgo.TryCommit); err != nil {
							t.Fatal(err)
						}
					}
				} else {
					k.produce(in, recs...)
				}
				k.table(out, time.Minute, func(m map[string]int64) bool { return maps.Equal(m, wantCounts(30, 7)) })
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				ends, err := k.adm.ListEndOffsets(ctx, in)
				if err != nil {
					t.Fatal(err)
				}
				want := map[int32]int64{}
				ends.Each(func(o kadm.ListedOffset) {
					if o.Offset > 0 {
						want[o.Partition] = o.Offset
					}
				})
				var got map[int32]int64
				defer func() {
					if t.Failed() {
						t.Logf("positions %v", got)
					}
				}()
				await.Until(t, 30*time.Second, fmt.Sprintf("positions at the ends %v", want), func() bool {
					got = a.Positions()[in]
					return maps.Equal(got, want)
				})
			})
		}
	}
}
