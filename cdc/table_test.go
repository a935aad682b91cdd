package cdc_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/cdc"
	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/internal/await"
)

type customer struct {
	ID        int64  `json:"id"`
	FirstName string `json:"first_name"`
	Bio       string `json:"bio"`
}

// event is a Debezium PostgreSQL change event of the customers table.
func event(op string, lsn int64, before, after string) string {
	if before == "" {
		before = "null"
	}
	if after == "" {
		after = "null"
	}
	return fmt.Sprintf(`{"before":%s,"after":%s,"source":{"connector":"postgresql","schema":"public","table":"customers","txId":%d,"lsn":%d,"ts_ms":1},"op":%q,"ts_ms":2}`, before, after, lsn/10, lsn, op)
}

// A CDC-fed table in the right state after creates, updates (with an
// unavailable TOAST column), deletes and their tombstones, a replayed
// duplicate, a primary-key change, then a truncate (with a later change
// before it and an older one after it) and malformed events; and a stream
// joined with it is enriched with the current row.
func TestCDCTable(t *testing.T) {
	b := engine.NewBuilder()
	customers := cdc.NewTable(b, "customers", "pg.public.customers", cdc.Column[int64]("id"), serde.Int64, serde.JSON[customer]())
	orders := engine.NewStream(b, "orders", serde.Int64, serde.String)
	engine.Join(orders, customers, func(_ int64, order string, c customer) string { return order + " for " + c.FirstName }).To("enriched")
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d := enginetest.New(t, top)
	pipe := func(key, value string, at int64) {
		t.Helper()
		var kb, vb []byte
		if key != "" {
			kb = []byte(key)
		}
		if value != "" {
			vb = []byte(value)
		}
		if err := d.PipeBytes("pg.public.customers", kb, vb, enginetest.At(at)); err != nil {
			t.Fatal(err)
		}
	}
	pipe(`{"id":1}`, event("c", 100, "", `{"id":1,"first_name":"Anne","bio":"painter"}`), 1)
	pipe(`{"id":2}`, event("c", 110, "", `{"id":2,"first_name":"Bo","bio":"cook"}`), 2)
	pipe(`{"id":1}`, event("u", 120, "", `{"id":1,"first_name":"Anne Marie","bio":"__debezium_unavailable_value"}`), 3)
	pipe(`{"id":2}`, event("d", 130, `{"id":2,"first_name":null,"bio":null}`, ""), 4)
	pipe(`{"id":2}`, "", 4)                                                             // the tombstone
	pipe(`{"id":2}`, event("c", 110, "", `{"id":2,"first_name":"Bo","bio":"cook"}`), 5) // replayed after a restart
	// A primary-key change: 1 becomes 3.
	pipe(`{"id":1}`, event("d", 140, `{"id":1,"first_name":null,"bio":null}`, ""), 6)
	pipe(`{"id":3}`, event("c", 141, "", `{"id":3,"first_name":"Anne Marie","bio":"painter"}`), 6)
	pipe(`{"id":4}`, `{"schema":{"type":"struct"},"payload":{"id":4,"first_name":"Cy","bio":"","__deleted":"false"}}`, 7) // unwrapped
	got := enginetest.StoreContents(d, "customers", serde.Int64, serde.JSON[customer]())
	want := map[int64]customer{3: {3, "Anne Marie", "painter"}, 4: {4, "Cy", ""}}
	if !maps.Equal(got, want) {
		t.Errorf("the table before the truncate %v, want %v", got, want)
	}
	// A create after the truncate that comes through another partition of
	// the topic before it; the truncate; an older event replayed after it; a
	// create after it.
	pipe(`{"id":7}`, event("c", 170, "", `{"id":7,"first_name":"Ed"}`), 8)
	pipe("", event("t", 160, "", ""), 8)
	pipe(`{"id":3}`, event("u", 145, "", `{"id":3,"first_name":"stale"}`), 8)
	pipe(`{"id":8}`, event("c", 180, "", `{"id":8,"first_name":"Flo"}`), 8)
	pipe(`{"id":5}`, `{"op":"c"`, 9)
	pipe(`{"id":"x"}`, event("c", 190, "", `{"id":6,"first_name":"Di"}`), 10)

	got = enginetest.StoreContents(d, "customers", serde.Int64, serde.JSON[customer]())
	want = map[int64]customer{7: {7, "Ed", ""}, 8: {8, "Flo", ""}}
	if !maps.Equal(got, want) {
		t.Errorf("the table %v, want %v", got, want)
	}
	in := enginetest.NewInput(d, "orders", serde.Int64, serde.String)
	in.Pipe(7, "o1", enginetest.At(11))
	in.Pipe(3, "o2", enginetest.At(12))
	in.Pipe(8, "o3", enginetest.At(13))
	var out []string
	for _, kv := range enginetest.NewOutput(d, "enriched", serde.Int64, serde.String).ReadKeyValues() {
		out = append(out, kv.Value)
	}
	if want := []string{"o1 for Ed", "o3 for Flo"}; !slices.Equal(out, want) {
		t.Errorf("enriched %v, want %v", out, want)
	}
	var skipped []string
	for reason, n := range d.Skipped() {
		if strings.Contains(reason, "cdc:") {
			skipped = append(skipped, fmt.Sprintf("%s=%d", reason[strings.Index(reason, "cdc:"):min(len(reason), strings.Index(reason, "cdc:")+30)], n))
		}
	}
	slices.Sort(skipped)
	if len(skipped) != 2 {
		t.Errorf("skipped %v, want the malformed event and the bad key", skipped)
	}
}

// The same on a broker: a Debezium topic of three partitions (keyed by the
// connector's key), an instance, the table's final state.
func TestCDCTableOnKafka(t *testing.T) {
	env := kafkaenv.ForTest(t)
	name := fmt.Sprintf("cdc-%d", time.Now().UnixNano())
	topic := name + ".public.customers"
	env.CreateTopics(t, 3, topic)
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	b := engine.NewBuilder()
	cdc.NewTable(b, "customers", topic, cdc.Column[int64]("id"), serde.Int64, serde.JSON[customer]())
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	a := enginetest.StartApp(t, top, engine.Config{AppID: name, Brokers: env.Brokers, Guarantee: engine.ExactlyOnce})
	var recs []*kgo.Record
	add := func(key, value string) {
		r := &kgo.Record{Key: []byte(key)}
		if value != "" {
			r.Value = []byte(value)
		}
		recs = append(recs, r)
	}
	for i := range 30 {
		add(fmt.Sprintf(`{"id":%d}`, i), event("c", int64(100+i), "", fmt.Sprintf(`{"id":%d,"first_name":"n%d","bio":"b%d"}`, i, i, i)))
	}
	for i := 0; i < 30; i += 3 {
		add(fmt.Sprintf(`{"id":%d}`, i), event("u", int64(200+i), "", fmt.Sprintf(`{"id":%d,"first_name":"m%d","bio":"__debezium_unavailable_value"}`, i, i)))
	}
	for i := 1; i < 30; i += 3 {
		add(fmt.Sprintf(`{"id":%d}`, i), event("d", int64(300+i), fmt.Sprintf(`{"id":%d}`, i), ""))
		add(fmt.Sprintf(`{"id":%d}`, i), "")
		add(fmt.Sprintf(`{"id":%d}`, i), event("c", int64(100+i), "", `{"id":1,"first_name":"stale"}`)) // replayed
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	want := map[int64]customer{}
	for i := range int64(30) {
		switch i % 3 {
		case 0:
			want[i] = customer{i, fmt.Sprintf("m%d", i), fmt.Sprintf("b%d", i)}
		case 2:
			want[i] = customer{i, fmt.Sprintf("n%d", i), fmt.Sprintf("b%d", i)}
		}
	}
	waitTable(t, a, want)

	// A truncate (in one partition of the topic), rows created after it
	// (in all of them), old events replayed after it: the new rows alone.
	recs = recs[:0]
	for i := range 10 {
		add(fmt.Sprintf(`{"id":%d}`, 100+i), event("c", int64(600+i), "", fmt.Sprintf(`{"id":%d,"first_name":"t%d"}`, 100+i, i)))
	}
	add("", event("t", 500, "", ""))
	for i := range 30 {
		add(fmt.Sprintf(`{"id":%d}`, i), event("u", int64(400+i), "", fmt.Sprintf(`{"id":%d,"first_name":"old"}`, i)))
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	want = map[int64]customer{}
	for i := range int64(10) {
		want[100+i] = customer{100 + i, fmt.Sprintf("t%d", i), ""}
	}
	waitTable(t, a, want)
}

func waitTable(t *testing.T, a *engine.App, want map[int64]customer) {
	t.Helper()
	await.NoError(t, 60*time.Second, "the table", func() error {
		got := map[int64]customer{}
		st, err := engine.QueryKeyValueStore(a, "customers", serde.Int64, serde.JSON[customer]())
		if err == nil {
			for kv, err := range st.All() {
				if err == nil {
					got[kv.Key] = kv.Value
				}
			}
		}
		if !maps.Equal(got, want) {
			return fmt.Errorf("%v, want %v", got, want)
		}
		return nil
	})
}
