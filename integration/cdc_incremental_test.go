package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/cdc"
	"github.com/oxbow-dev/oxbow/cdc/postgres/pgtest"
	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
)

// An incremental snapshot of a table added to the capture later, of
// 20,000 rows in chunks of 200, while a writer changes them, and the source
// SIGKILLed three times in the middle of it (each source killed had taken
// the snapshot past where the last one left it, and had not logged its
// end): afterwards the topic, folded per key in order, is the table, and
// the snapshot completed.
//
// The source tells its status every 200ms, not at its default 10s:
// the kills are placed by the snapshot's progress in the state record,
// which is written with each status, and at 10s the whole snapshot can
// pass between two records. (TestCDCSourceCrash runs at the default.)
func TestCDCIncrementalSnapshotCrash(t *testing.T) {
	env := kafkaenv.Real(t)
	dsn := pgtest.Database(t)
	// The snapshot goes at tens of thousands of rows a second, and the
	// state record that shows its progress is written every 200ms: the
	// kills come in its first half, so that the last one still lands with
	// a second or so of snapshot left.
	const rows = 50_000
	pgtest.Exec(t, dsn,
		`CREATE TABLE dbz_signal (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048))`,
		`CREATE TABLE items (id int PRIMARY KEY, v bigint NOT NULL, note text)`, `INSERT INTO items VALUES (1, 1, 'one')`,
		`CREATE TABLE big (id int PRIMARY KEY, v bigint NOT NULL)`)
	prefix := fmt.Sprintf("cdcinc%d", time.Now().UnixNano())
	slot := "inc_" + prefix[len(prefix)-12:]
	topic := prefix + ".public.big"
	childEnv := func(tables string) []string {
		return append(os.Environ(), cdcChildEnv+"=1", "OXBOW_CDC_DSN="+dsn, "OXBOW_CDC_SLOT="+slot, "OXBOW_CDC_PREFIX="+prefix,
			"OXBOW_CDC_BROKERS="+strings.Join(env.Brokers, ","), "OXBOW_CDC_TABLES="+tables,
			"OXBOW_CDC_SIGNAL=public.dbz_signal", "OXBOW_CDC_CHUNK=200", "OXBOW_CDC_STATUS=200ms")
	}
	// The initial snapshot, of items alone.
	child := startChild(t, "TestCDCSourceChild", childEnv("items"), prefix)
	t.Cleanup(func() {
		if child != nil {
			child.kill(t)
		}
	})
	stateTopic := prefix + ".oxbow-cdc-state"
	for lastAcked(t, env, stateTopic, slot) == 0 {
		select {
		case <-child.exited:
			t.Fatalf("the source exited\n%s", child.output())
		case <-time.After(50 * time.Millisecond):
		}
	}
	stopChild(t, child, "the source of items")

	// big, added: its incremental snapshot, under writes and kills.
	pgtest.Exec(t, dsn, fmt.Sprintf(`INSERT INTO big SELECT i, 0 FROM generate_series(1, %d) i`, rows))
	child = startChild(t, "TestCDCSourceChild", childEnv("items,big"), prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var writes atomic.Int64
	stop := make(chan struct{})
	writerErr := make(chan error, 1)
	go func() {
		w, err := pgx.Connect(ctx, dsn)
		if err != nil {
			writerErr <- err
			return
		}
		defer w.Close(context.Background())
		rng := rand.New(rand.NewPCG(3, 4))
		for {
			select {
			case <-stop:
				writerErr <- nil
				return
			default:
			}
			id := rng.IntN(rows+500) + 1
			var err error
			switch rng.IntN(4) {
			case 0, 1:
				_, err = w.Exec(ctx, `UPDATE big SET v = v + 1 WHERE id = $1`, id)
			case 2:
				_, err = w.Exec(ctx, `DELETE FROM big WHERE id = $1`, id)
			default:
				_, err = w.Exec(ctx, `INSERT INTO big VALUES ($1, 1000) ON CONFLICT (id) DO UPDATE SET v = big.v + 1000`, id)
			}
			if err != nil {
				writerErr <- err
				return
			}
			writes.Add(1)
			time.Sleep(time.Millisecond) // a steady load, not the most the machine can do
		}
	}()
	// How far the snapshot is, as the state record has it: the id of the
	// last row of the last chunk Kafka has.
	progress := func(st cdcState) int {
		var inc struct{ Last []string }
		if st.Incremental == nil || json.Unmarshal(st.Incremental, &inc) != nil || len(inc.Last) == 0 {
			return 0
		}
		n, _ := strconv.Atoi(inc.Last[0])
		return n
	}
	// Each kill comes once the state record shows the snapshot under way
	// past its point and past where the last kill left it (the source
	// killed has taken it on); the source's log then shows it had not
	// ended.
	last := 0
	for k, at := range []int{rows / 10, rows * 3 / 10, rows / 2} {
		for {
			st := lastState(t, env, stateTopic, slot)
			if containsTable(st.Tables, "public.big") {
				t.Fatalf("kill %d: the snapshot ended before it:\n%s", k+1, child.output())
			}
			if progress(st) >= max(at, last+1) {
				break
			}
			select {
			case err := <-writerErr:
				t.Fatalf("the writer stopped: %v", err)
			case <-child.exited:
				t.Fatalf("the source exited\n%s", child.output())
			case <-ctx.Done():
				t.Fatalf("kill %d: the snapshot is at id %d, not past %d, after 5m:\n%s", k+1, progress(st), max(at, last+1), child.output())
			case <-time.After(5 * time.Millisecond):
			}
		}
		killRunning(t, child, fmt.Sprintf("the source before kill %d", k+1))
		if strings.Contains(child.fullOutput(), snapshotEnded) {
			t.Fatalf("kill %d: the snapshot had ended before it:\n%s", k+1, child.output())
		}
		if last = progress(lastState(t, env, stateTopic, slot)); last == 0 {
			t.Fatalf("kill %d: no snapshot under way in the state record", k+1)
		}
		t.Logf("killed the source with the snapshot at id %d, %d writes", last, writes.Load())
		child = startChild(t, "TestCDCSourceChild", childEnv("items,big"), prefix)
	}
	// To the snapshot's end, as the state record has it.
	for st := lastState(t, env, stateTopic, slot); st.Incremental != nil || !containsTable(st.Tables, "public.big"); st = lastState(t, env, stateTopic, slot) {
		select {
		case <-ctx.Done():
			t.Fatalf("the incremental snapshot did not complete: %+v\n%s", st, child.output())
		case <-child.exited:
			t.Fatalf("the source exited\n%s", child.output())
		case <-time.After(100 * time.Millisecond):
		}
	}
	if !strings.Contains(child.fullOutput(), snapshotEnded) {
		t.Errorf("the last source did not log the snapshot's end, %q", snapshotEnded)
	}
	close(stop)
	if err := <-writerErr; err != nil {
		t.Fatalf("the writer: %v", err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO big VALUES (1, -1) ON CONFLICT (id) DO UPDATE SET v = -1`); err != nil {
		t.Fatal(err)
	}

	want := map[int]int64{}
	rs, err := conn.Query(ctx, `SELECT id, v FROM big`)
	if err != nil {
		t.Fatal(err)
	}
	var id int
	var v int64
	if _, err := pgx.ForEachRow(rs, []any{&id, &v}, func() error { want[id] = v; return nil }); err != nil {
		t.Fatal(err)
	}
	got := foldBig(t, env, topic)
	if !maps.Equal(got, want) {
		missing, wrong := 0, 0
		for k, v := range want {
			if g, ok := got[k]; !ok {
				missing++
			} else if g != v {
				wrong++
			}
		}
		t.Errorf("big's topic folded has %d rows, the table %d: %d missing, %d with another value, %d extra", len(got), len(want), missing, wrong, len(got)+missing-len(want))
	}
	awaitReady(t, child, "the last source")
	alive(t, child, "the last source")
	stopChild(t, child, "the last source")
	child = nil
	t.Logf("%d writes during the snapshot", writes.Load())
}

// snapshotEnded is what the source logs when a table's incremental
// snapshot is complete (only the last source of the test may).
const snapshotEnded = "the incremental snapshot of a table is complete"

func containsTable(ts []string, t string) bool {
	for _, x := range ts {
		if x == t {
			return true
		}
	}
	return false
}

// cdcState is the part of the source's state record the test reads.
type cdcState struct {
	Tables      []string        `json:"tables"`
	Acked       string          `json:"acked"`
	Incremental json.RawMessage `json:"incremental"`
}

// lastState reads the slot's latest state record.
func lastState(t *testing.T, env *kafkaenv.Env, topic, slot string) cdcState {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	end := endOffsets(t, kadm.NewClient(cl), topic)[0]
	var st cdcState
	for next := int64(0); next < end; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s: %v", topic, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			next = r.Offset + 1
			if string(r.Key) == slot {
				st = cdcState{}
				if err := json.Unmarshal(r.Value, &st); err != nil {
					t.Fatalf("state %s: %v", r.Value, err)
				}
			}
		})
	}
	return st
}

// foldBig reads big's topic up to the end marker (id 1 at -1) and folds it
// per key, in each partition's order.
func foldBig(t *testing.T, env *kafkaenv.Env, topic string) map[int]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rows := map[int]int64{}
	next := map[int32]int64{}
	var ends map[int32]int64 // once the end marker is seen: the partitions' ends then
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s: no end marker: %v", topic, ctx.Err())
		}
		end := false
		fs.EachRecord(func(r *kgo.Record) {
			next[r.Partition] = r.Offset + 1
			ev, err := cdc.Decode(r.Key, r.Value)
			if err != nil {
				t.Fatal(err)
			}
			var k struct{ ID int }
			if err := json.Unmarshal(r.Key, &k); err != nil {
				t.Fatalf("key %s: %v", r.Key, err)
			}
			switch ev.Op {
			case cdc.Create, cdc.Update, cdc.Read:
				var v int64
				if err := json.Unmarshal(ev.After["v"], &v); err != nil {
					t.Fatalf("value %s: %v", r.Value, err)
				}
				rows[k.ID] = v
				end = end || (k.ID == 1 && v == -1)
			case cdc.Delete:
				delete(rows, k.ID)
			}
		})
		if end && ends == nil {
			ends = endOffsets(t, kadm.NewClient(cl), topic)
		}
		if ends != nil {
			caught := true
			for p, e := range ends {
				caught = caught && next[p] >= e
			}
			if caught {
				return rows
			}
		}
	}
}
