package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/cdc"
	"github.com/oxbow-dev/oxbow/cdc/postgres"
	"github.com/oxbow-dev/oxbow/cdc/postgres/pgtest"
	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
	"github.com/oxbow-dev/oxbow/internal/await"
)

// running is a source running in the background for a test.
type running struct {
	src  *postgres.Source
	stop context.CancelFunc
	done chan error
}

func start(t testing.TB, cfg postgres.Config) *running {
	t.Helper()
	src, err := postgres.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{src: src, stop: cancel, done: make(chan error, 1)}
	go func() { r.done <- src.Run(ctx) }()
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { r.close(t) }) })
	return r
}

// awaitStreaming waits, up to a minute, for the source to be past its
// snapshot: streaming, with a position acknowledged.
func (r *running) awaitStreaming(t testing.TB) {
	t.Helper()
	await.Until(t, time.Minute, "the source streaming", func() bool { return r.src.Stats().Acknowledged != 0 })
}

// close stops the source and waits for Run to return.
func (r *running) close(t testing.TB) {
	t.Helper()
	r.stop()
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return 30s after its context was cancelled")
	}
	r.src.Close()
	r.done <- nil // a second close returns at once
}

// changes reads a topic from the start until want events (tombstones
// included) are there.
func changes(t testing.TB, brokers []string, topic string, want int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%d records in %s after 60s, want %d", len(out), topic, want)
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}

type decoded struct {
	key string
	ev  cdc.Event
}

func decodeAll(t *testing.T, recs []*kgo.Record) []decoded {
	t.Helper()
	var out []decoded
	for _, r := range recs {
		ev, err := cdc.Decode(r.Key, r.Value)
		if err != nil {
			t.Fatalf("the source wrote a record Decode refuses: %v\nkey %s\nvalue %s", err, r.Key, r.Value)
		}
		out = append(out, decoded{string(r.Key), ev})
	}
	return out
}

func config(t testing.TB, dsn string, env *kafkaenv.Env, tables ...string) postgres.Config {
	return postgres.Config{
		DSN: dsn, Tables: tables, Slot: "s_" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "_")),
		TopicPrefix: fmt.Sprintf("pg%d", time.Now().UnixNano()), Brokers: env.Brokers, StatusInterval: 100 * time.Millisecond,
	}
}

// The initial snapshot, then every kind of change, as Debezium's
// PostgreSQL connector writes them: keys of the primary key's columns,
// values converted by type, the unavailable-TOAST placeholder, the delete's
// tombstone, a primary-key change as a delete and a create, a truncate,
// before images under REPLICA IDENTITY FULL; positions in commit order.
func TestSourceEvents(t *testing.T) {
	env := kafkaenv.Real(t)
	dsn := pgtest.Database(t)
	pgtest.Exec(t, dsn,
		`CREATE TABLE items (id int PRIMARY KEY, name text, price numeric(8,2), ok boolean, born date, at timestamptz, raw bytea, doc jsonb, big text)`,
		`CREATE TABLE pairs (a text, b int, note text, PRIMARY KEY (b, a))`,
		`ALTER TABLE pairs REPLICA IDENTITY FULL`,
		`INSERT INTO items VALUES (1, 'one "quoted"', 9.99, true, '2024-02-29', '2024-01-02 03:04:05.5+00', '\x0102', '{"k": [1]}', (SELECT string_agg(md5(i::text), '') FROM generate_series(1, 1000) i))`,
		`INSERT INTO pairs VALUES ('x', 1, 'first')`)
	cfg := config(t, dsn, env, "items", "public.pairs")
	cfg.SkippedOperations = "none" // truncates too
	r := start(t, cfg)
	items, pairs := r.src.Topic("items"), r.src.Topic("public.pairs")
	if items != cfg.TopicPrefix+".public.items" {
		t.Fatalf("Topic(items) = %s", items)
	}
	snap := decodeAll(t, changes(t, env.Brokers, items, 1))
	if snap[0].ev.Op != cdc.Read || !snap[0].ev.Source.Snapshot || snap[0].key != `{"id":1}` {
		t.Fatalf("snapshot event %+v key %s", snap[0].ev, snap[0].key)
	}
	after := snap[0].ev.After
	for col, want := range map[string]string{
		"name": `"one \"quoted\""`, "price": `"A+c="`, "ok": `true`, "born": `19782`, // price: 999 at scale 2, Debezium's precise decimal
		"at": `"2024-01-02T03:04:05.500000Z"`, "raw": `"AQI="`, "doc": `"{\"k\": [1]}"`,
	} {
		if got := string(after[col]); got != want {
			t.Errorf("snapshot column %s = %s, want %s", col, got, want)
		}
	}

	pgtest.Exec(t, dsn,
		`INSERT INTO items (id, name) VALUES (2, 'two')`,
		`UPDATE items SET name = 'uno' WHERE id = 1`, // big is TOASTed and unchanged
		`DELETE FROM items WHERE id = 2`,
		`UPDATE items SET id = 3 WHERE id = 1`,
		`UPDATE pairs SET note = 'second' WHERE b = 1`,
		`DELETE FROM pairs WHERE b = 1`,
		`TRUNCATE items`)
	got := decodeAll(t, changes(t, env.Brokers, items, 1+8))[1:] // the snapshot's, then 8
	type want struct {
		op  cdc.Op
		key string
	}
	wants := []want{{cdc.Create, `{"id":2}`}, {cdc.Update, `{"id":1}`}, {cdc.Delete, `{"id":2}`}, {cdc.Tombstone, `{"id":2}`},
		{cdc.Delete, `{"id":1}`}, {cdc.Tombstone, `{"id":1}`}, {cdc.Create, `{"id":3}`}, {cdc.Truncate, ``}}
	if len(got) != len(wants) {
		t.Fatalf("%d events, want %d", len(got), len(wants))
	}
	for i, w := range wants {
		if got[i].ev.Op != w.op || got[i].key != w.key {
			t.Errorf("event %d: %s %s, want %s %s", i, got[i].ev.Op, got[i].key, w.op, w.key)
		}
	}
	if v := string(got[1].ev.After["big"]); v != `"`+cdc.Unavailable+`"` {
		t.Errorf("the unchanged TOASTed column: %.40s, want the placeholder", v)
	}
	// The key change of a row whose TOASTed column did not change: without
	// REPLICA IDENTITY FULL the WAL has no value for it (as with Debezium).
	if v := string(got[6].ev.After["big"]); v != `"`+cdc.Unavailable+`"` {
		t.Errorf("the created row after the key change has big %.40s, want the placeholder", v)
	}
	// Positions grow in the order of the changes, and past the snapshot's.
	prev := snap[0].ev.Source.Position()
	for i, d := range got {
		if d.ev.Op == cdc.Tombstone {
			continue
		}
		p := d.ev.Source.Position()
		if p.Before(prev) || (p == prev && d.ev.Op != cdc.Create) {
			t.Errorf("event %d (%s) at %+v, not after %+v", i, d.ev.Op, p, prev)
		}
		prev = p
	}

	ps := decodeAll(t, changes(t, env.Brokers, pairs, 4))
	if ps[0].ev.Op != cdc.Read || ps[0].key != `{"a":"x","b":1}` {
		t.Errorf("pairs snapshot %s %s, want r with the key's columns in the table's order", ps[0].ev.Op, ps[0].key)
	}
	if ps[1].ev.Op != cdc.Update || string(ps[1].ev.Before["note"]) != `"first"` || string(ps[1].ev.After["note"]) != `"second"` {
		t.Errorf("REPLICA IDENTITY FULL update: before %s after %s", ps[1].ev.Before, ps[1].ev.After)
	}
	if ps[2].ev.Op != cdc.Delete || string(ps[2].ev.Before["note"]) != `"second"` || ps[3].ev.Op != cdc.Tombstone {
		t.Errorf("REPLICA IDENTITY FULL delete: %s before %s, then %s", ps[2].ev.Op, ps[2].ev.Before, ps[3].ev.Op)
	}

	// Everything is acknowledged to the server once Kafka has it.
	r.close(t)
	st := r.src.Stats()
	if st.SnapshotRows != 2 || st.Changes != 8 {
		t.Errorf("stats %+v, want 2 snapshot rows and 8 changes (tombstones are not changes)", st)
	}
	var confirmed string
	query(t, dsn, &confirmed, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, cfg.Slot)
	if confirmed != st.Acknowledged.String() || st.Acknowledged == 0 {
		t.Errorf("the slot's confirmed position %s, the source's %s", confirmed, st.Acknowledged)
	}
}

func query(t *testing.T, dsn string, dst any, sql string, args ...any) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, sql, args...).Scan(dst); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// A stopped source goes on from where the server has its slot: changes
// made while it was stopped arrive, nothing twice; the snapshot is not
// taken again.
func TestSourceResumes(t *testing.T) {
	env := kafkaenv.Real(t)
	dsn := pgtest.Database(t)
	pgtest.Exec(t, dsn, `CREATE TABLE t (id int PRIMARY KEY, v int)`, `INSERT INTO t VALUES (1, 1)`)
	cfg := config(t, dsn, env, "t")
	r := start(t, cfg)
	topic := r.src.Topic("t")
	changes(t, env.Brokers, topic, 1) // the snapshot
	pgtest.Exec(t, dsn, `UPDATE t SET v = 2`)
	changes(t, env.Brokers, topic, 2)
	r.close(t)
	pgtest.Exec(t, dsn, `UPDATE t SET v = 3`, `INSERT INTO t VALUES (2, 1)`)
	r2 := start(t, cfg)
	pgtest.Exec(t, dsn, `UPDATE t SET v = 4 WHERE id = 2`)
	got := decodeAll(t, changes(t, env.Brokers, topic, 5))
	var seq []string
	for _, d := range got {
		seq = append(seq, fmt.Sprintf("%s%s=%s", d.ev.Op, d.key, d.ev.After["v"]))
	}
	want := `r{"id":1}=1 u{"id":1}=2 u{"id":1}=3 c{"id":2}=1 u{"id":2}=4`
	if strings.Join(seq, " ") != want {
		t.Errorf("events %s\nwant   %s", strings.Join(seq, " "), want)
	}
	r2.close(t)
	if st := r2.src.Stats(); st.SnapshotRows != 0 {
		t.Errorf("the second run wrote %d snapshot rows, want none", st.SnapshotRows)
	}
}

// The database restarting under the source: it reconnects and goes on.
func TestSourceSurvivesDatabaseRestart(t *testing.T) {
	env := kafkaenv.Real(t)
	dsn := pgtest.Database(t)
	pgtest.Exec(t, dsn, `CREATE TABLE t (id int PRIMARY KEY, v int)`)
	cfg := config(t, dsn, env, "t")
	r := start(t, cfg)
	topic := r.src.Topic("t")
	pgtest.Exec(t, dsn, `INSERT INTO t VALUES (1, 1)`)
	changes(t, env.Brokers, topic, 1)
	pgtest.Restart(t)
	pgtest.Exec(t, dsn, `INSERT INTO t VALUES (2, 1)`)
	got := decodeAll(t, changes(t, env.Brokers, topic, 2))
	if got[1].key != `{"id":2}` || got[1].ev.Op != cdc.Create {
		t.Errorf("after the restart: %s %s", got[1].ev.Op, got[1].key)
	}
	if st := r.src.Stats(); st.Sessions < 2 {
		t.Errorf("%d sessions, want a reconnection", st.Sessions)
	}
}

// What the source refuses, and how it says so.
func TestSourceErrors(t *testing.T) {
	env := kafkaenv.Real(t)
	dsn := pgtest.Database(t)
	pgtest.Exec(t, dsn, `CREATE TABLE keyless (v int)`)
	for name, cfg := range map[string]postgres.Config{
		"no dsn":      {Tables: []string{"t"}, Slot: "s", TopicPrefix: "p", Brokers: env.Brokers},
		"bad slot":    {DSN: dsn, Tables: []string{"t"}, Slot: "Bad-Slot", TopicPrefix: "p", Brokers: env.Brokers},
		"no tables":   {DSN: dsn, Slot: "s", TopicPrefix: "p", Brokers: env.Brokers},
		"bad table":   {DSN: dsn, Tables: []string{"a.b.c"}, Slot: "s", TopicPrefix: "p", Brokers: env.Brokers},
		"no prefix":   {DSN: dsn, Tables: []string{"t"}, Slot: "s", Brokers: env.Brokers},
		"no brokers":  {DSN: dsn, Tables: []string{"t"}, Slot: "s", TopicPrefix: "p"},
		"bad the dsn": {DSN: "postgres://x:badport/", Tables: []string{"t"}, Slot: "s", TopicPrefix: "p", Brokers: env.Brokers},
	} {
		if _, err := postgres.New(cfg); err == nil {
			t.Errorf("%s: New accepted %+v", name, cfg)
		}
	}
	for _, c := range []struct{ table, want string }{
		{"missing", "does not exist"},
		{"keyless", "has no primary key"},
	} {
		cfg := config(t, dsn, env, c.table)
		src, err := postgres.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		err = src.Run(ctx)
		cancel()
		src.Close()
		if err == nil || !strings.Contains(err.Error(), c.want) || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Run on %s: %v, want an error saying %q", c.table, err, c.want)
		}
	}
}

// A column added while the source streams: the relation message that
// comes before the next change names it, and the events have it.
func TestSourceSchemaChange(t *testing.T) {
	env := kafkaenv.Real(t)
	dsn := pgtest.Database(t)
	pgtest.Exec(t, dsn, `CREATE TABLE t (id int PRIMARY KEY, v int)`, `INSERT INTO t VALUES (1, 1)`)
	r := start(t, config(t, dsn, env, "t"))
	topic := r.src.Topic("t")
	changes(t, env.Brokers, topic, 1)
	pgtest.Exec(t, dsn, `UPDATE t SET v = 2`, `ALTER TABLE t ADD COLUMN note text DEFAULT 'n'`, `INSERT INTO t VALUES (2, 1, 'added')`,
		`ALTER TABLE t DROP COLUMN v`, `UPDATE t SET note = 'x' WHERE id = 1`)
	got := decodeAll(t, changes(t, env.Brokers, topic, 4))
	var rows []string
	for _, d := range got[1:] {
		rows = append(rows, fmt.Sprintf("%s", d.ev.After))
	}
	want := []string{`map[id:1 v:2]`, `map[id:2 note:"added" v:1]`, `map[id:1 note:"x"]`}
	if fmt.Sprint(rows) != fmt.Sprint(want) {
		t.Errorf("rows %v, want %v", rows, want)
	}
}

// A truncate of a table whose topic is compacted: the broker refuses a
// record without a key there, so the truncate has the key {} (which no
// row has), and the capture goes on. Decoded, it is a truncate.
func TestSourceTruncateCompactedTopic(t *testing.T) {
	env := kafkaenv.Real(t)
	dsn := pgtest.Database(t)
	pgtest.Exec(t, dsn, `CREATE TABLE t (id int PRIMARY KEY, v int)`, `INSERT INTO t VALUES (1, 1)`)
	cfg := config(t, dsn, env, "t")
	cfg.SkippedOperations = "none"
	topic := cfg.TopicPrefix + ".public.t"
	adm, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	compact := "compact"
	if _, err := kadm.NewClient(adm).CreateTopic(context.Background(), 1, -1, map[string]*string{"cleanup.policy": &compact}, topic); err != nil {
		t.Fatal(err)
	}
	r := start(t, cfg)
	changes(t, env.Brokers, topic, 1) // the snapshot
	pgtest.Exec(t, dsn, `TRUNCATE t`, `INSERT INTO t VALUES (2, 2)`)
	got := changes(t, env.Brokers, topic, 3)
	if string(got[1].Key) != `{}` {
		t.Errorf("the truncate's key is %q, want {}", got[1].Key)
	}
	evs := decodeAll(t, got)
	if evs[1].ev.Op != cdc.Truncate || evs[1].ev.Key != nil {
		t.Errorf("event 1 decoded as %s with key %v, want a truncate without a key", evs[1].ev.Op, evs[1].ev.Key)
	}
	if evs[2].ev.Op != cdc.Create || evs[2].key != `{"id":2}` {
		t.Errorf("after the truncate: %s %s, want the insert", evs[2].ev.Op, evs[2].key)
	}
	select {
	case err := <-r.done:
		t.Fatalf("Run returned after the truncate: %v", err)
	default:
	}
}

// A slot whose tables are idle while the database's other tables are
// busy: with the default settings, the source reports the server's
// position as acknowledged, so the slot does not hold back the WAL.
func TestSourceIdleSlotAdvances(t *testing.T) {
	env := kafkaenv.Real(t)
	dsn := pgtest.Database(t)
	pgtest.Exec(t, dsn, `CREATE TABLE t (id int PRIMARY KEY)`, `CREATE TABLE other (id serial PRIMARY KEY, v text)`)
	cfg := config(t, dsn, env, "t")
	cfg.StatusInterval = 0 // the default
	r := start(t, cfg)
	conn := connect(t, dsn)
	ctx := context.Background()
	confirmed := func() pglogrepl.LSN {
		var s *string
		if err := conn.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, cfg.Slot).Scan(&s); err != nil {
			t.Fatal(err)
		}
		if s == nil {
			return 0
		}
		lsn, err := pglogrepl.ParseLSN(*s)
		if err != nil {
			t.Fatal(err)
		}
		return lsn
	}
	deadline := time.Now().Add(time.Minute) // for both waits
	r.awaitStreaming(t)
	for i := range 200 {
		if _, err := conn.Exec(ctx, `INSERT INTO other (v) VALUES ($1)`, fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	var s string
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&s); err != nil {
		t.Fatal(err)
	}
	after, _ := pglogrepl.ParseLSN(s)
	await.NoError(t, time.Until(deadline), "the slot's confirmed position past the other table's writes", func() error {
		if c := confirmed(); c < after {
			return fmt.Errorf("confirmed at %s, the writes end at %s", c, after)
		}
		return nil
	})
	if st := r.src.Stats(); st.Changes != 0 {
		t.Errorf("%d changes written, want none: nothing captured changed", st.Changes)
	}
}

// Heartbeats, as Debezium's: a record on __debezium-heartbeat.<prefix>
// keyed by the prefix, at each interval, and the action query run each
// time.
func TestSourceHeartbeats(t *testing.T) {
	env := kafkaenv.Real(t)
	dsn := pgtest.Database(t)
	pgtest.Exec(t, dsn, `CREATE TABLE beats (id serial PRIMARY KEY, at timestamptz DEFAULT now())`)
	cfg := config(t, dsn, env, "beats")
	cfg.HeartbeatInterval = 100 * time.Millisecond
	cfg.HeartbeatActionQuery = `INSERT INTO beats DEFAULT VALUES`
	start(t, cfg)
	beats := changes(t, env.Brokers, "__debezium-heartbeat."+cfg.TopicPrefix, 3)
	for _, b := range beats[:3] {
		var v struct {
			TsMs int64 `json:"ts_ms"`
		}
		if string(b.Key) != `{"serverName":"`+cfg.TopicPrefix+`"}` || json.Unmarshal(b.Value, &v) != nil || v.TsMs == 0 {
			t.Errorf("heartbeat key %s value %s", b.Key, b.Value)
		}
	}
	// The action query's rows, captured.
	evs := decodeAll(t, changes(t, env.Brokers, cfg.TopicPrefix+".public.beats", 2))
	if evs[0].ev.Op != cdc.Create || evs[1].ev.Op != cdc.Create {
		t.Errorf("the action query's rows: %s, %s", evs[0].ev.Op, evs[1].ev.Op)
	}
	if _, err := postgres.New(postgres.Config{DSN: dsn, Tables: []string{"beats"}, Slot: "s", TopicPrefix: "p", Brokers: env.Brokers,
		HeartbeatActionQuery: "SELECT 1"}); err == nil {
		t.Error("New took an action query without a heartbeat interval")
	}
}
