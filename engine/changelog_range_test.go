package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/internal/state"
	"github.com/oxbow-dev/oxbow/engine/internal/topo"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// changelogRecorder keeps a task's changelog records, flush by flush.
type changelogRecorder struct {
	topic   string
	flushes []map[string]int // records of each key in each flush interval
	last    map[string][]byte
	// stray counts tombstones of keys the changelog never had.
	stray int
}

func (c *changelogRecorder) Send(o topo.Output) error {
	if o.Topic != c.topic {
		return nil
	}
	c.flushes[len(c.flushes)-1][string(o.Key)]++
	if _, had := c.last[string(o.Key)]; !had && o.Value == nil {
		c.stray++
	}
	c.last[string(o.Key)] = o.Value
	return nil
}

// Sliding windows and sessions write their store at once (their reads
// range over it) while their changes wait in the record cache: the
// changelog too gets one record per key a flush, the latest, and no
// tombstone for a session made and merged away in between, as Kafka
// Streams' caching stores log (a session count of 1,000 keys logged every
// update and a tombstone for each session merged away, 33 times Kafka
// Streams' records; sliding windows 4 times). What the changelog ends
// with is what the store holds, so a restore gives it back.
func TestRangeStoresLogOncePerFlush(t *testing.T) {
	for _, kind := range []string{"session", "sliding", "hopping"} {
		t.Run(kind, func(t *testing.T) {
			b := engine.NewBuilder()
			in := engine.NewStream(b, "in", serde.String, serde.Bytes)
			var out *engine.Stream[engine.Windowed[string], int64]
			switch kind {
			case "session":
				out = engine.SessionCount(in.GroupByKey().SessionWindowedBy(engine.SessionWindows(5*time.Minute).Grace(time.Minute)),
					engine.Named("c"), engine.Materialized("c")).ToStream()
			case "sliding":
				out = engine.WindowedCount(in.GroupByKey().WindowedBy(engine.SlidingWindows(5*time.Minute).Grace(time.Minute)),
					engine.Named("c"), engine.Materialized("c")).ToStream()
			default:
				out = engine.WindowedCount(in.GroupByKey().WindowedBy(engine.HoppingWindows(5*time.Minute, time.Minute).Grace(time.Minute)),
					engine.Named("c"), engine.Materialized("c")).ToStream()
			}
			out.WithSerdes(engine.SessionWindowedSerde(serde.String), serde.Int64).To("out")
			top, err := b.Build()
			if err != nil {
				t.Fatal(err)
			}
			tp := topo.Unwrap(top)
			db, err := state.Open(t.TempDir(), state.Options{Layout: func(s string) state.Layout { return state.LayoutOf(tp.Stores[s]) }})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			st := db.Task()
			rec := &changelogRecorder{topic: topo.ChangelogTopic("c"), flushes: []map[string]int{{}}, last: map[string][]byte{}}
			task, err := topo.NewTask(topo.TaskConfig{Topology: tp, Sub: tp.Subs[0], TopicName: func(r topo.TopicRef) string { return r.Name },
				OpenStore: st.OpenStore, Collector: rec, Now: time.Now, CacheBytes: 10 << 20})
			if err != nil {
				t.Fatal(err)
			}
			defer task.Close()
			// 100 keys, a record every 2 s: each key's records 200 s apart,
			// one session each, windows expiring as time goes on.
			base := time.Now().Add(-2 * time.Hour).UnixMilli()
			for i := range 3000 {
				in := topo.Input{Topic: "in", Offset: int64(i), Key: fmt.Appendf(nil, "k%d", i%100), Value: []byte("v"), Timestamp: base + int64(i)*2000}
				if err := task.Process(in); err != nil {
					t.Fatal(err)
				}
				if (i+1)%500 == 0 {
					if err := task.Flush(); err != nil {
						t.Fatal(err)
					}
					if err := st.Commit(); err != nil {
						t.Fatal(err)
					}
					rec.flushes = append(rec.flushes, map[string]int{})
				}
			}
			for i, f := range rec.flushes {
				for k, n := range f {
					if n > 1 {
						t.Fatalf("flush %d logged key %q %d times", i, k, n)
					}
				}
			}
			if rec.stray > 0 {
				t.Errorf("%d tombstones of keys the changelog never had", rec.stray)
			}
			held := map[string][]byte{}
			for e, err := range st.Store("c", 0).Range(nil, nil) {
				if err != nil {
					t.Fatal(err)
				}
				held[string(e.Key)] = e.Value
			}
			logged := 0
			for k, v := range rec.last {
				if v != nil {
					logged++
					if h, ok := held[k]; !ok || string(h) != string(v) {
						t.Errorf("the changelog ends with %x for %x, the store holds %x (%v)", v, k, h, ok)
					}
				}
			}
			if logged != len(held) || len(held) == 0 {
				t.Errorf("the changelog ends with %d windows, the store holds %d", logged, len(held))
			}
		})
	}
}
