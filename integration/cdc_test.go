package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/cdc"
	"github.com/oxbow-dev/oxbow/cdc/postgres"
	"github.com/oxbow-dev/oxbow/cdc/postgres/pgtest"
	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/internal/await"
)

const cdcChildEnv = "OXBOW_CDC_CHILD"

// TestCDCSourceChild is the CDC crash test's child: a PostgreSQL source
// that runs until it is killed (or, on SIGTERM, stops). It does nothing in
// a normal test run.
func TestCDCSourceChild(t *testing.T) {
	if os.Getenv(cdcChildEnv) == "" {
		t.Skip("the CDC crash test's child process; run by TestCDCSourceCrash")
	}
	tables := []string{"items"}
	if ts := os.Getenv("OXBOW_CDC_TABLES"); ts != "" {
		tables = strings.Split(ts, ",")
	}
	chunk, _ := strconv.Atoi(os.Getenv("OXBOW_CDC_CHUNK"))
	var status time.Duration // the source's default unless the parent says
	if s := os.Getenv("OXBOW_CDC_STATUS"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("OXBOW_CDC_STATUS: %v", err)
		}
		status = d
	}
	src, err := postgres.New(postgres.Config{
		DSN:                          os.Getenv("OXBOW_CDC_DSN"),
		Tables:                       tables,
		SignalDataCollection:         os.Getenv("OXBOW_CDC_SIGNAL"),
		IncrementalSnapshotChunkSize: chunk,
		Slot:                         os.Getenv("OXBOW_CDC_SLOT"),
		TopicPrefix:                  os.Getenv("OXBOW_CDC_PREFIX"),
		Brokers:                      strings.Split(os.Getenv("OXBOW_CDC_BROKERS"), ","),
		Partitions:                   3,
		StatusInterval:               status,
		Logger:                       slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	fmt.Println("READY") // a SIGTERM stops it from here on
	if err := src.Run(ctx); err != nil {
		t.Fatal(err)
	}
}

// cdcChange is a change of a row: what the writer's audit table says was
// committed, and what a change event in Kafka says.
type cdcChange struct {
	op string // c, u or d (a snapshot's r is a c)
	v  int64  // the row's v after the change (0 for a delete)
}

func (c cdcChange) String() string { return fmt.Sprintf("%s%d", c.op, c.v) }

// The source, at its default configuration (a status every 10s), is
// killed with SIGKILL four times and the database restarted once while
// 10,000 row changes commit (one to four per transaction, on 300 keys);
// after the restart the source reconnects and writes changes committed
// since. Afterwards every committed change is in Kafka, in commit
// order per key once replays (duplicates at positions already seen) are
// passed over, every replay is of a transaction at or after the source's
// record at the interruption before it, and a CDC-fed table of the topic
// equals the database's table.
func TestCDCSourceCrash(t *testing.T) {
	env := kafkaenv.Real(t)
	dsn := pgtest.Database(t)
	const keys, total = 300, 10_000
	pgtest.Exec(t, dsn,
		`CREATE TABLE items (id int PRIMARY KEY, v bigint NOT NULL, note text)`,
		`CREATE TABLE audit (seq bigserial PRIMARY KEY, id int NOT NULL, v bigint NOT NULL, op text NOT NULL)`,
		`CREATE SEQUENCE vseq`,
		`INSERT INTO items SELECT i, nextval('vseq'), 'initial' FROM generate_series(1, 100) i`,
		`INSERT INTO audit (id, v, op) SELECT id, v, 'c' FROM items ORDER BY id`)
	prefix := fmt.Sprintf("cdccrash%d", time.Now().UnixNano())
	slot := "crash_" + prefix[len(prefix)-12:]
	topic := prefix + ".public.items"
	childEnv := append(os.Environ(), cdcChildEnv+"=1", "OXBOW_CDC_DSN="+dsn, "OXBOW_CDC_SLOT="+slot,
		"OXBOW_CDC_PREFIX="+prefix, "OXBOW_CDC_BROKERS="+strings.Join(env.Brokers, ","))
	child := startChild(t, "TestCDCSourceChild", childEnv, prefix)
	t.Cleanup(func() {
		if child != nil {
			child.kill(t)
		}
	})

	// The writer starts once the snapshot is in Kafka: changes before it
	// are in the snapshot's rows, not events of their own.
	adm := kadm.NewClient(mustClient(t, env))
	for {
		ends, err := adm.ListEndOffsets(context.Background(), topic)
		var n int64
		if err == nil {
			ends.Each(func(o kadm.ListedOffset) { n += max(o.Offset, 0) })
		}
		if n >= 100 {
			break
		}
		select {
		case <-child.exited:
			t.Fatalf("the source exited\n%s", child.output())
		case <-time.After(50 * time.Millisecond):
		}
	}

	// The writer.
	var done atomic.Int64
	writerErr := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	go func() { writerErr <- writeChanges(ctx, dsn, keys, total, &done) }()

	// At each interruption: the position of the source's last record of
	// what Kafka acknowledged (it passes over the transactions before it
	// when it resumes), and where the topic ends.
	stateTopic := prefix + ".oxbow-cdc-state"
	var stops []cdcStop
	kills := 0
	// Each comes once the writer is past its point and the source (a new
	// one after a kill) is streaming, and before the writer is done.
	for i, at := range []int64{1500, 3500, 5000, 6500, 8500} {
		for done.Load() < at || !strings.Contains(child.fullOutput(), "cdc/postgres: streaming") {
			select {
			case err := <-writerErr:
				if err == nil {
					t.Fatalf("the writer was done before interruption %d:\n%s", i+1, child.output())
				}
				t.Fatalf("the writer stopped early at %d changes: %v", done.Load(), err)
			case <-child.exited:
				// Before a planned kill, and through the database's
				// restart: the source reconnects, it never exits.
				t.Fatalf("the source exited by itself at %d changes:\n%s", done.Load(), child.output())
			case <-time.After(5 * time.Millisecond):
			}
		}
		if done.Load() >= total {
			t.Fatalf("the writer was done before interruption %d", i+1)
		}
		if i == 2 {
			alive(t, child, "the source")
			t.Logf("restarting the database at %d changes", done.Load())
			// The source keeps running: its record before the restart is at
			// most as far as the one it resumes from.
			acked := lastAcked(t, env, stateTopic, slot)
			pgtest.Restart(t)
			ends := endOffsets(t, adm, topic)
			stops = append(stops, cdcStop{acked, ends})
			awaitReconnected(t, env, dsn, topic, ends, child)
			continue
		}
		t.Logf("killing the source at %d changes", done.Load())
		killRunning(t, child, "the source")
		kills++
		stops = append(stops, cdcStop{lastAcked(t, env, stateTopic, slot), endOffsets(t, adm, topic)})
		child = startChild(t, "TestCDCSourceChild", childEnv, prefix)
	}
	if kills != 4 || len(stops) != 5 {
		t.Fatalf("%d kills and %d interruptions; the campaign plans 4 and 5", kills, len(stops))
	}
	if err := <-writerErr; err != nil {
		t.Fatalf("the writer: %v", err)
	}

	// The source acknowledges the end of the WAL: everything is in Kafka.
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var end string
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&end); err != nil {
		t.Fatal(err)
	}
	for {
		var caught bool
		err := conn.QueryRow(ctx, `SELECT confirmed_flush_lsn >= $1::pg_lsn FROM pg_replication_slots WHERE slot_name = $2`, end, slot).Scan(&caught)
		if err != nil {
			t.Fatalf("the slot: %v\n%s", err, child.output())
		}
		if caught {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the source did not acknowledge %s in time\n%s", end, child.output())
		case <-time.After(50 * time.Millisecond):
		}
	}
	awaitReady(t, child, "the last source")
	alive(t, child, "the last source")
	stopChild(t, child, "the last source")
	child = nil

	// Every committed change, in order, per key.
	committed := map[int][]cdcChange{}
	rows, err := conn.Query(ctx, `SELECT id, v, op FROM audit ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	var id int
	var v int64
	var op string
	if _, err := pgx.ForEachRow(rows, []any{&id, &v, &op}, func() error {
		if op == "d" {
			v = 0
		}
		committed[id] = append(committed[id], cdcChange{op, v})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	inKafka, events, replayed := readItems(t, env, topic)
	replays := len(replayed)
	if len(committed) == 0 {
		t.Fatal("no changes committed")
	}
	n := 0
	for id, want := range committed {
		n += len(want)
		if got := inKafka[id]; !slices.Equal(got, want) {
			t.Errorf("key %d: in Kafka %v\ncommitted %v", id, got, want)
		}
	}
	for id := range inKafka {
		if committed[id] == nil {
			t.Errorf("key %d is in Kafka, never committed: %v", id, inKafka[id])
		}
	}
	// Duplicates are only of what Kafka took past the source's last record
	// of what it acknowledged: every replay written after a stop is of a
	// transaction that committed at or after the source's record at that
	// stop — not anything since the slot's position was last written to
	// disk, which a database restart goes back to. (How many there are
	// depends on how far the record lags, a status interval's worth and
	// the machine's load: logged, not bounded.)
	wrong := 0
	for _, e := range replayed {
		at := -1
		for i, s := range stops {
			if e.offset >= s.ends[e.partition] {
				at = i
			}
		}
		if at < 0 || e.commit < stops[at].acked {
			if wrong++; wrong <= 5 {
				t.Errorf("a replay at %s[%d]@%d of a transaction committed at %d, before the source's record (%v) at the stop before it", topic, e.partition, e.offset, e.commit, stops[max(at, 0)].acked)
			}
		}
	}
	t.Logf("%d committed changes (with the snapshot's); %d change events in Kafka, %d of them replays; %d of the replays before the source's records", n, events, replays, wrong)

	// The table the topic makes equals the database's.
	want := map[int64]item{}
	rows, err = conn.Query(ctx, `SELECT id, v, note FROM items`)
	if err != nil {
		t.Fatal(err)
	}
	var it item
	if _, err := pgx.ForEachRow(rows, []any{&it.ID, &it.V, &it.Note}, func() error {
		want[it.ID] = it
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	b := engine.NewBuilder()
	cdc.NewTable(b, "items", topic, cdc.Column[int64]("id"), serde.Int64, serde.JSON[item]())
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	app := enginetest.StartApp(t, top, engine.Config{AppID: prefix, Brokers: env.Brokers, Guarantee: engine.ExactlyOnce})
	await.NoError(t, 2*time.Minute, "the CDC-fed table", func() error {
		got := map[int64]item{}
		st, err := engine.QueryKeyValueStore(app, "items", serde.Int64, serde.JSON[item]())
		if err == nil {
			for kv, err := range st.All() {
				if err == nil {
					got[kv.Key] = kv.Value
				}
			}
		}
		if !maps.Equal(got, want) {
			return fmt.Errorf("%d rows, the database %d; they differ", len(got), len(want))
		}
		return nil
	})
}

// awaitReconnected waits, after a restart of the database, for a change
// event in topic (past from, its end offsets at the restart) of a
// transaction committed after it: only a session begun since can write
// one (the writer goes on). A source that stays alive but never
// reconnects fails the test.
func awaitReconnected(t *testing.T, env *kafkaenv.Env, dsn, topic string, from map[int32]int64, child *crashChild) {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var after int64 // the end of the WAL after the restart
	await.NoError(t, 2*time.Minute, "the end of the WAL after the restart", func() error {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		return conn.QueryRow(ctx, `SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint`).Scan(&after)
	})
	offsets := map[int32]kgo.Offset{}
	for p, o := range from {
		offsets[p] = kgo.NewOffset().At(o)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for {
		pctx, pcancel := context.WithTimeout(ctx, 200*time.Millisecond)
		fs := cl.PollFetches(pctx)
		pcancel()
		var commit int64
		fs.EachRecord(func(r *kgo.Record) {
			if ev, err := cdc.Decode(r.Key, r.Value); err == nil && ev.Op != cdc.Tombstone {
				commit = max(commit, ev.Source.CommitLSN)
			}
		})
		if commit > after {
			t.Logf("the source wrote a transaction committed after the restart %v later", time.Since(start).Round(time.Millisecond))
			return
		}
		select {
		case <-child.exited:
			t.Fatalf("the source exited by itself after the database's restart:\n%s", child.output())
		case <-ctx.Done():
			t.Fatalf("the source wrote no transaction committed after the restart (past %X/%X) within 2m:\n%s", after>>32, uint32(after), child.output())
		default:
		}
	}
}

func mustClient(t *testing.T, env *kafkaenv.Env) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

type item struct {
	ID   int64  `json:"id"`
	V    int64  `json:"v"`
	Note string `json:"note"`
}

// writeChanges commits total row changes to items, one to four per
// transaction, each recorded in audit in the same transaction. It
// reconnects when the database goes away; a transaction whose commit
// failed is not counted (the audit table says whether it happened).
func writeChanges(ctx context.Context, dsn string, keys, total int, done *atomic.Int64) error {
	rng := rand.New(rand.NewPCG(7, 11))
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	for int(done.Load()) < total {
		if conn == nil || conn.IsClosed() {
			c, err := pgx.Connect(ctx, dsn)
			if err != nil {
				if ctx.Err() != nil {
					return fmt.Errorf("reconnecting: %w", err)
				}
				time.Sleep(100 * time.Millisecond) // the database is restarting
				continue
			}
			conn = c
		}
		n := 1 + rng.IntN(4)
		ids := map[int]bool{}
		for len(ids) < n {
			ids[1+rng.IntN(keys)] = true
		}
		note := fmt.Sprintf("n%d", rng.IntN(1000))
		del := rng.IntN(5) == 0
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			for _, id := range slices.Sorted(maps.Keys(ids)) {
				var old int64
				err := tx.QueryRow(ctx, `SELECT v FROM items WHERE id = $1 FOR UPDATE`, id).Scan(&old)
				switch {
				case errors.Is(err, pgx.ErrNoRows):
					_, err = tx.Exec(ctx, `WITH n AS (INSERT INTO items VALUES ($1, nextval('vseq'), $2) RETURNING v)
						INSERT INTO audit (id, v, op) SELECT $1, v, 'c' FROM n`, id, note)
				case err != nil:
				case del:
					_, err = tx.Exec(ctx, `WITH d AS (DELETE FROM items WHERE id = $1 RETURNING v)
						INSERT INTO audit (id, v, op) SELECT $1, v, 'd' FROM d`, id)
				default:
					_, err = tx.Exec(ctx, `WITH u AS (UPDATE items SET v = nextval('vseq'), note = $2 WHERE id = $1 RETURNING v)
						INSERT INTO audit (id, v, op) SELECT $1, v, 'u' FROM u`, id, note)
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			conn.Close(context.Background())
			conn = nil
			continue
		}
		done.Add(int64(n))
	}
	return nil
}

// readItems reads the whole topic and returns, per key, its change events
// in order with replays passed over: an event at a position no later than
// one already seen for its key is a duplicate the source wrote again after
// a crash.
// cdcStop is an interruption of the capture: the position of the
// source's last record of what Kafka acknowledged (bytes into the WAL), and
// the topic's end offsets.
type cdcStop struct {
	acked int64
	ends  map[int32]int64
}

// cdcEvent is where a change event is and which transaction it is of (a
// replay's, readItems says).
type cdcEvent struct {
	partition int32
	offset    int64
	commit    int64 // the transaction's commit LSN
}

// lastAcked reads the source's state topic to its end: the position of
// the slot's latest record of what Kafka acknowledged (0 if none).
func lastAcked(t *testing.T, env *kafkaenv.Env, topic, slot string) int64 {
	t.Helper()
	st := lastState(t, env, topic, slot)
	if st.Acked == "" {
		return 0
	}
	var hi, lo uint64
	if _, err := fmt.Sscanf(st.Acked, "%X/%X", &hi, &lo); err != nil {
		t.Fatalf("state: acked %q: %v", st.Acked, err)
	}
	return int64(hi<<32 | lo)
}

func endOffsets(t *testing.T, adm *kadm.Client, topic string) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

func readItems(t *testing.T, env *kafkaenv.Env, topic string) (map[int][]cdcChange, int, []cdcEvent) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	remaining := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			remaining[o.Partition] = o.Offset
		}
	})
	type seen struct {
		pos cdc.Position
		any bool
	}
	last := map[int]seen{}
	out := map[int][]cdcChange{}
	events := 0
	var replays []cdcEvent
	for len(remaining) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s: %v", topic, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset+1 >= remaining[r.Partition] {
				delete(remaining, r.Partition)
			}
			ev, err := cdc.Decode(r.Key, r.Value)
			if err != nil {
				t.Fatalf("offset %d: %v", r.Offset, err)
			}
			if ev.Op == cdc.Tombstone {
				return
			}
			events++
			var k struct {
				ID int `json:"id"`
			}
			if err := json.Unmarshal(r.Key, &k); err != nil {
				t.Fatalf("key %s: %v", r.Key, err)
			}
			p := ev.Source.Position()
			if s := last[k.ID]; s.any && !s.pos.Before(p) {
				replays = append(replays, cdcEvent{r.Partition, r.Offset, ev.Source.CommitLSN})
				return
			}
			last[k.ID] = seen{p, true}
			c := cdcChange{op: string(ev.Op)}
			if c.op == "r" {
				c.op = "c"
			}
			if ev.Op != cdc.Delete {
				if err := json.Unmarshal(ev.After["v"], &c.v); err != nil {
					t.Fatalf("offset %d: v: %v", r.Offset, err)
				}
			}
			out[k.ID] = append(out[k.ID], c)
		})
	}
	return out, events, replays
}
