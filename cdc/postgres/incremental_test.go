package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/cdc"
	"github.com/oxbow-dev/oxbow/cdc/postgres"
	"github.com/oxbow-dev/oxbow/cdc/postgres/pgtest"
	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
	"github.com/oxbow-dev/oxbow/internal/await"
)

const signalTable = `CREATE TABLE dbz_signal (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048))`

// A table added to the capture after the initial snapshot is snapshotted
// incrementally, in chunks, while its rows change under it and the source
// is stopped and started again in the middle: folded in order, its topic
// is the table. Then a signal takes another snapshot of a table captured
// from the start.
func TestIncrementalSnapshot(t *testing.T) {
	env := kafkaenv.Real(t)
	dsn := pgtest.Database(t)
	pgtest.Exec(t, dsn, signalTable, `CREATE TABLE a (id int PRIMARY KEY, v int)`, `INSERT INTO a SELECT i, i FROM generate_series(1, 50) i`,
		`CREATE TABLE b (id int PRIMARY KEY, v int)`)
	cfg := config(t, dsn, env, "a")
	cfg.SignalDataCollection = "public.dbz_signal"
	cfg.IncrementalSnapshotChunkSize = 100
	r := start(t, cfg)
	changes(t, env.Brokers, r.src.Topic("a"), 50)
	// Streaming: the initial snapshot is recorded as done (stopped before
	// that, the next source would take it again, b's rows with it).
	r.awaitStreaming(t)
	r.close(t)

	const rows = 3000
	pgtest.Exec(t, dsn, fmt.Sprintf(`INSERT INTO b SELECT i, 0 FROM generate_series(1, %d) i`, rows))
	conn := connect(t, dsn)
	ctx := context.Background()
	// Changes between each chunk's read and its window's close, which the
	// chunk must give way to (and the writer below, everywhere).
	hooked := connect(t, dsn)
	var chunks atomic.Int64
	t.Cleanup(postgres.SetAfterChunkRead(func() { // reset after the sources' cleanups, which come later
		n := chunks.Add(1)
		if _, err := hooked.Exec(ctx, `UPDATE b SET v = v + 1000000 WHERE id % 10 = $1`, n%10); err != nil {
			t.Error(err)
		}
		if _, err := hooked.Exec(ctx, `DELETE FROM b WHERE id % 97 = $1`, n%97); err != nil {
			t.Error(err)
		}
	}))
	cfg.Tables = []string{"a", "b"}
	r = start(t, cfg)

	// Writes to b, all through the snapshot: updates, deletes, inserts
	// above and inside the key range.
	stop := make(chan struct{})
	var stopOnce sync.Once
	var wg sync.WaitGroup
	halt := func() { stopOnce.Do(func() { close(stop) }); wg.Wait() }
	t.Cleanup(halt) // before conn's cleanup, which comes earlier
	wg.Add(1)
	writes := 0
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(1, 2))
		for {
			select {
			case <-stop:
				return
			default:
			}
			id := rng.IntN(rows+200) + 1
			var err error
			switch rng.IntN(4) {
			case 0, 1:
				_, err = conn.Exec(ctx, `UPDATE b SET v = v + 1 WHERE id = $1`, id)
			case 2:
				_, err = conn.Exec(ctx, `DELETE FROM b WHERE id = $1`, id)
			default:
				_, err = conn.Exec(ctx, `INSERT INTO b VALUES ($1, 1000) ON CONFLICT (id) DO UPDATE SET v = b.v + 1000`, id)
			}
			if err != nil {
				t.Error(err)
				return
			}
			writes++
		}
	}()
	until := func(what string, cond func() bool) {
		t.Helper()
		await.NoError(t, 2*time.Minute, what, func() error {
			if cond() {
				return nil
			}
			return fmt.Errorf("%+v", r.src.Stats())
		})
	}
	// Stopped and started again in the middle of the snapshot.
	until("a third of b snapshotted", func() bool { return r.src.Stats().IncrementalRows >= rows/3 })
	r.close(t)
	first := r.src.Stats().IncrementalRows
	r = start(t, cfg)
	until("b snapshotted", func() bool { st := r.src.Stats(); return st.IncrementalTables == 0 && st.IncrementalRows > 0 })
	halt()
	pgtest.Exec(t, dsn, `UPDATE a SET v = -1 WHERE id = 1`, `INSERT INTO b VALUES (1, -1) ON CONFLICT (id) DO UPDATE SET v = -1`) // last, in both topics

	want := map[string]string{}
	rs, err := conn.Query(ctx, `SELECT id, v FROM b`)
	if err != nil {
		t.Fatal(err)
	}
	for rs.Next() {
		var id, v int
		if err := rs.Scan(&id, &v); err != nil {
			t.Fatal(err)
		}
		want[fmt.Sprint(id)] = fmt.Sprint(v)
	}
	got, incremental := foldTopic(t, env.Brokers, r.src.Topic("b"), `{"id":1}`, "-1")
	if !maps.Equal(got, want) {
		missing, wrong := 0, 0
		for k, v := range want {
			if g, ok := got[k]; !ok {
				missing++
			} else if g != v {
				wrong++
			}
		}
		t.Errorf("b's topic folded has %d rows, the table %d: %d missing, %d with another value, %d extra", len(got), len(want), missing, wrong, len(got)+missing-len(want))
	}
	// The fold is the table only if every row the writers left alone came
	// from the snapshot; how many that is depends on them.
	if incremental == 0 {
		t.Errorf("no incremental snapshot rows in b's topic")
	}
	t.Logf("%d writes during the snapshot, %d chunks changed between their read and their window's close; %d rows snapshotted before the restart, %d after; %d in b's topic",
		writes, chunks.Load(), first, r.src.Stats().IncrementalRows, incremental)

	// A signal: a's rows again, as incremental snapshot rows.
	before := r.src.Stats().IncrementalRows
	pgtest.Exec(t, dsn, `INSERT INTO dbz_signal VALUES ('s1', 'execute-snapshot', '{"data-collections": ["public.a"], "type": "incremental"}')`)
	until("a snapshotted on the signal", func() bool { st := r.src.Stats(); return st.IncrementalTables == 0 && st.IncrementalRows >= before+50 })
	pgtest.Exec(t, dsn, `UPDATE a SET v = -2 WHERE id = 1`)
	gotA, incA := foldTopic(t, env.Brokers, r.src.Topic("a"), `{"id":1}`, "-2")
	if incA != 50 || len(gotA) != 50 {
		t.Errorf("after the signal, a's topic has %d incremental rows and %d rows folded, want 50 and 50", incA, len(gotA))
	}
}

// foldTopic reads a topic up to the event of key endKey with value endV in
// column v, and folds it into rows by key (id → v); it counts the events
// of incremental snapshots.
func foldTopic(t *testing.T, brokers []string, topic, endKey, endV string) (map[string]string, int) {
	t.Helper()
	var rows map[string]string
	var incremental int
	await.NoError(t, time.Minute, topic, func() error {
		rows, incremental = map[string]string{}, 0
		for _, r := range readTopic(t, brokers, topic, 1) {
			ev, err := cdc.Decode(r.Key, r.Value)
			if err != nil {
				t.Fatal(err)
			}
			var k struct{ ID int }
			_ = json.Unmarshal(r.Key, &k)
			id := fmt.Sprint(k.ID)
			switch ev.Op {
			case cdc.Create, cdc.Update, cdc.Read:
				rows[id] = string(ev.After["v"])
				if ev.Op == cdc.Read && json.Valid(r.Value) && containsIncremental(r.Value) {
					incremental++
				}
				if string(r.Key) == endKey && string(ev.After["v"]) == endV {
					return nil
				}
			case cdc.Delete:
				delete(rows, id)
			}
		}
		return fmt.Errorf("no event of %s with v %s", endKey, endV)
	})
	return rows, incremental
}

func containsIncremental(v []byte) bool {
	var e struct {
		Source struct {
			Snapshot string `json:"snapshot"`
		} `json:"source"`
	}
	return json.Unmarshal(v, &e) == nil && e.Source.Snapshot == "incremental"
}

// Without a signal table, a table added after the initial snapshot is an
// error that says what to do; so is a signal table that does not exist.
func TestIncrementalSnapshotErrors(t *testing.T) {
	env := kafkaenv.Real(t)
	dsn := pgtest.Database(t)
	pgtest.Exec(t, dsn, `CREATE TABLE a (id int PRIMARY KEY)`, `CREATE TABLE b (id int PRIMARY KEY)`)
	cfg := config(t, dsn, env, "a")
	r := start(t, cfg)
	r.awaitStreaming(t)
	r.close(t)
	for _, c := range []struct {
		signal, want string
	}{
		{"", "set Config.SignalDataCollection"},
		{"public.nosuch", "the signal table public.nosuch does not exist"},
	} {
		cfg.Tables, cfg.SignalDataCollection = []string{"a", "b"}, c.signal
		src, err := postgres.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err = src.Run(ctx)
		cancel()
		src.Close()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("signal table %q: Run returned %v, want an error saying %q", c.signal, err, c.want)
		}
	}
}
