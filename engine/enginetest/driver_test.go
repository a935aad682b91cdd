package enginetest_test

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

func build(t testing.TB, b *engine.Builder) *engine.Topology {
	t.Helper()
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return top
}

func sum(a, v int64) int64 { return a + v }

// counts: "in" (string -> int64) summed per key into the store "sums" and
// the topic "sums"; a tombstone on "in" passes to the topic "echo".
func countsTopology(t testing.TB) *engine.Topology {
	b := engine.NewBuilder()
	in := engine.NewStream(b, "in", serde.String, serde.Int64, engine.Named("in"))
	in.To("echo")
	in.GroupByKey().Reduce(sum, engine.Named("sum"), engine.Materialized("sums")).ToStream().To("sums")
	return build(t, b)
}

// Undecodable bytes give a *serde.Error that says where they came from; the
// driver goes on with the next good record.
func TestPipeBytesDecodeError(t *testing.T) {
	d := enginetest.New(t, countsTopology(t))
	good := func(k string, v int64, ts int64) {
		t.Helper()
		if err := enginetest.NewInput(d, "in", serde.String, serde.Int64).TryPipe(k, v, enginetest.At(ts)); err != nil {
			t.Fatal(err)
		}
	}
	good("a", 1, 1)

	tests := []struct {
		name       string
		key, value []byte
		part       string
		offset     int64
		got        int
	}{
		{"short value", []byte("a"), []byte{1, 2, 3}, "value", 1, 3},
		{"long value", []byte("a"), make([]byte, 9), "value", 2, 9},
		{"empty value", []byte("a"), []byte{}, "value", 3, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := d.PipeBytes("in", tt.key, tt.value, enginetest.At(2))
			var se *serde.Error
			if !errors.As(err, &se) {
				t.Fatalf("PipeBytes = %v, want a *serde.Error", err)
			}
			if se.Topic != "in" || se.Partition != 0 || se.Offset != tt.offset || se.Part != tt.part || se.Encode {
				t.Errorf("serde.Error = %+v, want topic in, partition 0, offset %d, part %s, decoding", *se, tt.offset, tt.part)
			}
			var size *serde.SizeError
			if !errors.As(err, &size) || size.Got != tt.got {
				t.Errorf("the cause %v is not a SizeError of %d bytes", err, tt.got)
			}
			want := fmt.Sprintf("topic in partition 0 offset %d", tt.offset)
			if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "decode "+tt.part) {
				t.Errorf("message %q lacks %q or the part", err, want)
			}
		})
	}
	good("a", 2, 3)
	good("b", 5, 4)
	if got := enginetest.StoreContents(d, "sums", serde.String, serde.Int64); !maps.Equal(got, map[string]int64{"a": 3, "b": 5}) {
		t.Errorf("sums = %v, want map[a:3 b:5]", got)
	}
	// The bad records stay on the topic, with their offsets.
	if msgs := d.Messages("in"); len(msgs) != 6 || msgs[4].Offset != 4 {
		t.Errorf("topic in holds %d records", len(msgs))
	}
}

// A key that cannot be decoded is reported as the key part.
func TestPipeBytesKeyDecodeError(t *testing.T) {
	b := engine.NewBuilder()
	engine.NewStream(b, "in", serde.Int64, serde.String).To("out")
	d := enginetest.New(t, build(t, b))
	err := d.PipeBytes("in", []byte("abc"), []byte("v"), enginetest.At(1))
	var se *serde.Error
	if !errors.As(err, &se) || se.Part != "key" || string(se.Bytes) != "abc" || se.Offset != 0 {
		t.Fatalf("PipeBytes = %#v, want a key decode error at offset 0 holding the bytes", err)
	}
	if err := d.PipeBytes("in", make([]byte, 8), []byte("v"), enginetest.At(2)); err != nil {
		t.Errorf("a good record after the bad one: %v", err)
	}
	if n := len(d.Messages("out")); n != 1 {
		t.Errorf("out has %d records, want 1", n)
	}
}

// picky is a string serde that cannot decode "poison".
var picky = serde.Func(
	func(v string) ([]byte, error) { return []byte(v), nil },
	func(b []byte) (string, error) {
		if string(b) == "poison" {
			return "", errors.New("poisoned")
		}
		return string(b), nil
	},
)

// A record that cannot be decoded after a repartition is reported with the
// internal topic's full name.
func TestDecodeErrorOnInternalTopic(t *testing.T) {
	b := engine.NewBuilder()
	s := engine.NewStream(b, "in", serde.String, serde.String)
	engine.SelectKey(s, func(_, v string) string { return v }).WithSerdes(picky, picky).
		Repartition(engine.Named("by-value")).To("out")
	d := enginetest.New(t, build(t, b), enginetest.AppID("shop"))
	err := d.PipeBytes("in", []byte("k"), []byte("poison"), enginetest.At(1))
	var se *serde.Error
	if !errors.As(err, &se) || se.Topic != "shop-by-value-repartition" || se.Part != "key" || se.Offset != 0 {
		t.Fatalf("PipeBytes = %v, want a key decode error on shop-by-value-repartition offset 0", err)
	}
	if err := d.PipeBytes("in", []byte("k"), []byte("fine"), enginetest.At(2)); err != nil {
		t.Fatal(err)
	}
	got := enginetest.NewOutput(d, "out", serde.String, serde.String).ReadKeyValues()
	if want := []engine.KeyValue[string, string]{{Key: "fine", Value: "fine"}}; !slices.Equal(got, want) {
		t.Errorf("out = %v, want %v", got, want)
	}
}

// When a record fans out to two sub-topologies and one of them cannot
// decode its copy, the other still processes its own: with Kafka both
// records are on their topics and the two tasks are independent.
func TestDecodeErrorDoesNotDropOtherQueuedRecords(t *testing.T) {
	b := engine.NewBuilder()
	s := engine.NewStream(b, "in", serde.String, serde.String)
	engine.SelectKey(s, func(_, v string) string { return v }).WithSerdes(picky, picky).
		Repartition(engine.Named("picky")).To("picky-out")
	s.To("mid")
	engine.NewStream(b, "mid", serde.String, serde.String).To("mid-out")
	d := enginetest.New(t, build(t, b))
	err := d.PipeBytes("in", []byte("k"), []byte("poison"), enginetest.At(1))
	var se *serde.Error
	if !errors.As(err, &se) || se.Topic != "test-picky-repartition" {
		t.Fatalf("PipeBytes = %v, want the decode error of the repartition topic", err)
	}
	if n := len(d.Messages("mid")); n != 1 {
		t.Fatalf("mid holds %d records, want 1", n)
	}
	if n := len(d.Messages("mid-out")); n != 1 {
		t.Fatalf("after a decode error the driver drops every other queued record: mid holds the record but mid-out has %d (the task reading mid never saw it)", n)
	}
}

func TestPipeToUnreadTopic(t *testing.T) {
	d := enginetest.New(t, countsTopology(t))
	for _, topic := range []string{"sums", "nope", "sums-changelog", ""} {
		err := d.PipeBytes(topic, []byte("k"), make([]byte, 8), enginetest.At(1))
		if err == nil {
			t.Errorf("piping to %q succeeded", topic)
			continue
		}
		for _, want := range []string{fmt.Sprintf("does not read topic %q", topic), "[in]"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q lacks %q", err, want)
			}
		}
	}
	if err := enginetest.NewInput(d, "nope", serde.String, serde.Int64).TryPipe("k", 1, enginetest.At(1)); err == nil {
		t.Error("TryPipe to an unread topic succeeded")
	}
	if n := len(d.Messages("nope")); n != 0 {
		t.Errorf("the refused record was written: %d records on nope", n)
	}
}

// Every write of a logged store goes to its changelog, on the task's
// partition, with the record's timestamp; a delete writes a tombstone; a
// delete of an absent key in a table writes nothing. Unlogged stores write
// no changelog.
func TestChangelog(t *testing.T) {
	b := engine.NewBuilder()
	tbl := engine.NewTable(b, "tin", serde.String, serde.Int64, engine.Materialized("tbl"), engine.InMemory())
	tbl.Filter(func(_ string, v int64) bool { return v > 0 }, engine.Materialized("positive"), engine.WithoutChangelog())
	engine.NewStream(b, "in", serde.String, serde.Int64).GroupByKey().Count(engine.Materialized("cnt"))
	d := enginetest.New(t, build(t, b))
	tin := enginetest.NewInput(d, "tin", serde.String, serde.Int64)
	tin.Pipe("a", 1, enginetest.At(1))
	tin.Pipe("b", 2, enginetest.At(2))
	tin.Pipe("a", 3, enginetest.At(3))
	tin.Delete("a", enginetest.At(4))
	tin.Delete("never", enginetest.At(5))
	in := enginetest.NewInput(d, "in", serde.String, serde.Int64)
	in.Pipe("x", 0, enginetest.At(6))
	in.Pipe("x", 0, enginetest.At(7))

	if got, want := d.ChangelogTopic("tbl"), "test-tbl-changelog"; got != want {
		t.Errorf("ChangelogTopic(tbl) = %q, want %q", got, want)
	}
	type msg struct {
		key   string
		value []byte
		ts    int64
	}
	var got []msg
	for _, m := range d.Messages(d.ChangelogTopic("tbl")) {
		got = append(got, msg{string(m.Key), m.Value, m.Timestamp.Sub(enginetest.Epoch).Milliseconds()})
	}
	i64 := func(v int64) []byte { b, _ := serde.Int64.Encode(v); return b }
	// Without a record cache the delete of a key the table never had is
	// written and logged too, as Kafka Streams' logged store does.
	want := []msg{{"a", i64(1), 1}, {"b", i64(2), 2}, {"a", i64(3), 3}, {"a", nil, 4}, {"never", nil, 5}}
	if !slices.EqualFunc(got, want, func(a, b msg) bool {
		return a.key == b.key && a.ts == b.ts && (a.value == nil) == (b.value == nil) && string(a.value) == string(b.value)
	}) {
		t.Errorf("changelog of tbl = %v, want %v", got, want)
	}
	// The changelog is a table: replayed, it gives the store's contents.
	replayed := enginetest.ReadTable(enginetest.NewOutput(d, d.ChangelogTopic("tbl"), serde.String, serde.Int64))
	if stored := enginetest.StoreContents(d, "tbl", serde.String, serde.Int64); !maps.Equal(replayed, stored) {
		t.Errorf("the changelog replays to %v, the store holds %v", replayed, stored)
	}
	cnt := enginetest.ReadTable(enginetest.NewOutput(d, d.ChangelogTopic("cnt"), serde.String, serde.Int64))
	if !maps.Equal(cnt, map[string]int64{"x": 2}) || len(d.Messages(d.ChangelogTopic("cnt"))) != 2 {
		t.Errorf("changelog of cnt = %v in %d records, want x:2 in 2", cnt, len(d.Messages(d.ChangelogTopic("cnt"))))
	}
	if n := len(d.Messages(d.ChangelogTopic("positive"))); n != 0 {
		t.Errorf("the unlogged store wrote %d changelog records", n)
	}
	if got := enginetest.StoreContents(d, "positive", serde.String, serde.Int64); !maps.Equal(got, map[string]int64{"b": 2}) {
		t.Errorf("positive = %v, want map[b:2]", got)
	}
}

// Internal topics carry the application id given with AppID (default
// "test"): repartition topics and changelogs alike.
func TestInternalTopicsPrefixedWithAppID(t *testing.T) {
	b := engine.NewBuilder()
	s := engine.NewStream(b, "in", serde.String, serde.Int64)
	engine.SelectKey(s, func(k string, _ int64) string { return "k-" + k }).
		GroupByKey(engine.Named("rekey")).Count(engine.Materialized("counts"))
	top := build(t, b)
	for _, app := range []string{"", "shop-v2"} {
		var opts []enginetest.Option
		prefix := "test-"
		if app != "" {
			opts = append(opts, enginetest.AppID(app))
			prefix = app + "-"
		}
		d := enginetest.New(t, top, opts...)
		enginetest.NewInput(d, "in", serde.String, serde.Int64).Pipe("a", 1, enginetest.At(1))
		want := []string{prefix + "counts-changelog", prefix + "rekey-repartition", "in"}
		slices.Sort(want)
		if got := d.Topics(); !slices.Equal(got, want) {
			t.Errorf("AppID %q: topics = %q, want %q", app, got, want)
		}
		if got := d.InternalTopic("rekey-repartition"); got != prefix+"rekey-repartition" {
			t.Errorf("InternalTopic = %q", got)
		}
		rp := enginetest.NewOutput(d, d.InternalTopic("rekey-repartition"), serde.String, serde.Int64).ReadKeyValues()
		if want := []engine.KeyValue[string, int64]{{Key: "k-a", Value: 1}}; !slices.Equal(rp, want) {
			t.Errorf("repartition topic holds %v, want %v", rp, want)
		}
		// An internal topic is read under its full name.
		if err := d.PipeBytes(prefix+"rekey-repartition", []byte("k-b"), make([]byte, 8), enginetest.At(2)); err != nil {
			t.Errorf("piping to the full repartition topic name: %v", err)
		}
		if err := d.PipeBytes("rekey-repartition", []byte("k-b"), make([]byte, 8), enginetest.At(2)); err == nil {
			t.Error("piping to the unprefixed repartition topic name succeeded")
		}
		if got := enginetest.StoreContents(d, "counts", serde.String, serde.Int64); !maps.Equal(got, map[string]int64{"k-a": 1, "k-b": 1}) {
			t.Errorf("counts = %v", got)
		}
	}
}

// ReadTable folds the records not read yet into the table they leave.
func TestReadTable(t *testing.T) {
	b := engine.NewBuilder()
	engine.NewTable(b, "in", serde.String, serde.Int64).ToStream().To("out")
	d := enginetest.New(t, build(t, b))
	in := enginetest.NewInput(d, "in", serde.String, serde.Int64)
	out := enginetest.NewOutput(d, "out", serde.String, serde.Int64)
	in.Pipe("a", 1, enginetest.At(1))
	in.Pipe("b", 2, enginetest.At(2))
	in.Pipe("a", 3, enginetest.At(3))
	in.Delete("b", enginetest.At(4))
	in.Pipe("c", 0, enginetest.At(5))
	if got := enginetest.ReadTable(out); !maps.Equal(got, map[string]int64{"a": 3, "c": 0}) {
		t.Errorf("ReadTable = %v, want map[a:3 c:0]", got)
	}
	if !out.Empty() {
		t.Error("ReadTable left records unread")
	}
	// Only what is new since: a second read starts from an empty table.
	in.Delete("a", enginetest.At(6))
	in.Pipe("d", 4, enginetest.At(7))
	if got := enginetest.ReadTable(out); !maps.Equal(got, map[string]int64{"d": 4}) {
		t.Errorf("second ReadTable = %v, want map[d:4]", got)
	}
	if got := enginetest.ReadTable(out); len(got) != 0 {
		t.Errorf("third ReadTable = %v, want empty", got)
	}
	// ReadRecords shows the tombstones themselves.
	all := enginetest.NewOutput(d, "out", serde.String, serde.Int64).ReadRecords()
	var tombstones []string
	for _, r := range all {
		if r.Tombstone {
			tombstones = append(tombstones, r.Key)
		}
	}
	if !slices.Equal(tombstones, []string{"b", "a"}) {
		t.Errorf("tombstones = %q, want [b a]", tombstones)
	}
}

func TestStoreContentsAndErrors(t *testing.T) {
	d := enginetest.New(t, countsTopology(t))
	in := enginetest.NewInput(d, "in", serde.String, serde.Int64)
	in.Pipe("a", 2, enginetest.At(1))
	in.Pipe("b", 3, enginetest.At(2))
	in.Pipe("a", 4, enginetest.At(3))
	if got := enginetest.StoreContents(d, "sums", serde.String, serde.Int64); !maps.Equal(got, map[string]int64{"a": 6, "b": 3}) {
		t.Errorf("StoreContents = %v", got)
	}
	if got := enginetest.StoreContents(d, "sums", serde.String, serde.Bytes); len(got["a"]) != 8 {
		t.Errorf("raw bytes of a = %v", got["a"])
	}
	_, err := d.LocalStore("nope")
	if err == nil || !strings.Contains(err.Error(), `no store "nope"`) || !strings.Contains(err.Error(), "[sums]") {
		t.Errorf("LocalStore(nope) = %v, want an error listing the stores", err)
	}
	// A store read with the wrong value serde fails on the value, with the
	// store's name.
	q, err := engine.QueryKeyValueStore(d, "sums", serde.String, serde.JSON[string]())
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = q.Get("a")
	var se *serde.Error
	if !errors.As(err, &se) || se.Store != "sums" || se.Part != "value" || !strings.Contains(err.Error(), "store sums") {
		t.Errorf("Get with the wrong serde = %v, want a value decode error naming store sums", err)
	}
}

// Skipped counts dropped records by node and reason.
func TestSkipped(t *testing.T) {
	b := engine.NewBuilder()
	s := engine.NewStream(b, "in", serde.String, serde.Int64)
	engine.Map(s, func(k string, v int64) (string, int64) { return k, v }, engine.Named("m")).To("mapped")
	s.GroupByKey().Count(engine.Named("cnt"))
	engine.NewTable(b, "tin", serde.String, serde.Int64, engine.Named("t"))
	d := enginetest.New(t, build(t, b))
	if got := d.Skipped(); len(got) != 0 {
		t.Errorf("Skipped before any record = %v", got)
	}
	in := enginetest.NewInput(d, "in", serde.String, serde.Int64)
	in.Pipe("a", 1, enginetest.At(1))
	in.Delete("a", enginetest.At(2))
	in.Delete("b", enginetest.At(3))
	if err := d.PipeBytes("tin", nil, make([]byte, 8), enginetest.At(4)); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{
		"m: tombstone in Map": 2,
		"cnt: record without a key or value in an aggregation": 2,
		"t-table: record without a key for a table":            1,
	}
	if got := d.Skipped(); !maps.Equal(got, want) {
		t.Errorf("Skipped = %v, want %v", got, want)
	}
}

func TestDriverLifecycle(t *testing.T) {
	if _, err := enginetest.Start(nil); err == nil || !strings.Contains(err.Error(), "Build") {
		t.Errorf("Start(nil) = %v, want an error saying to build a topology", err)
	}
	start := time.Date(2030, 5, 6, 7, 8, 9, 0, time.UTC)
	d, err := enginetest.Start(countsTopology(t), enginetest.WallClock(start))
	if err != nil {
		t.Fatal(err)
	}
	if !d.Now().Equal(start) {
		t.Errorf("Now() = %v, want %v", d.Now(), start)
	}
	d.AdvanceWallClock(90 * time.Second)
	if !d.Now().Equal(start.Add(90 * time.Second)) {
		t.Errorf("Now() = %v after advancing 90s", d.Now())
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.PipeBytes("in", []byte("a"), make([]byte, 8), start); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("PipeBytes after Close = %v, want an error saying the driver is closed", err)
	}
	if err := d.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

// Outputs and messages: offsets count per topic, tombstones keep a nil
// value, headers and timestamps pass through, and each Output reads from
// the start of the topic on its own.
func TestMessagesAndOutputs(t *testing.T) {
	d := enginetest.New(t, countsTopology(t))
	in := enginetest.NewInput(d, "in", serde.String, serde.Int64)
	h := engine.Header{Key: "h", Value: []byte("1")}
	in.Pipe("a", 1, enginetest.At(10), h)
	in.Delete("a", enginetest.At(20))
	echo := d.Messages("echo")
	if len(echo) != 2 || echo[0].Offset != 0 || echo[1].Offset != 1 {
		t.Fatalf("echo = %+v", echo)
	}
	if echo[1].Value != nil || echo[0].Value == nil {
		t.Errorf("values = %v, %v; want bytes then a tombstone", echo[0].Value, echo[1].Value)
	}
	if !echo[0].Timestamp.Equal(enginetest.At(10)) || len(echo[0].Headers) != 1 || echo[0].Headers[0].Key != "h" {
		t.Errorf("echo[0] lost its timestamp or headers: %+v", echo[0])
	}
	echo[0].Offset = 99 // a copy
	if d.Messages("echo")[0].Offset != 0 {
		t.Error("Messages returns the driver's own slice")
	}
	o1 := enginetest.NewOutput(d, "echo", serde.String, serde.Int64)
	o2 := enginetest.NewOutput(d, "echo", serde.String, serde.Int64)
	if o1.Empty() {
		t.Error("a new output is empty though the topic holds records")
	}
	if n := len(o1.ReadRecords()); n != 2 || !o1.Empty() {
		t.Errorf("o1 read %d", n)
	}
	if n := len(o2.ReadKeyValues()); n != 2 {
		t.Errorf("o2 read %d", n)
	}
	if got := o1.ReadRecords(); len(got) != 0 {
		t.Errorf("o1 read again %v", got)
	}
}

// The package example: a running total per customer.
func Example() {
	b := engine.NewBuilder()
	engine.NewStream(b, "purchases", serde.String, serde.Int64).
		GroupByKey().
		Reduce(func(total, v int64) int64 { return total + v }, engine.Materialized("totals")).
		ToStream().
		To("totals")
	top, err := b.Build()
	if err != nil {
		panic(err)
	}

	d, err := enginetest.Start(top, enginetest.AppID("shop"))
	if err != nil {
		panic(err)
	}
	defer d.Close()
	in := enginetest.NewInput(d, "purchases", serde.String, serde.Int64)
	in.Pipe("alice", 3, enginetest.At(1))
	in.Pipe("bob", 10, enginetest.At(2))
	in.Pipe("alice", 2, enginetest.At(3))

	out := enginetest.NewOutput(d, "totals", serde.String, serde.Int64)
	for _, kv := range out.ReadKeyValues() {
		fmt.Println(kv.Key, kv.Value)
	}
	fmt.Println(enginetest.StoreContents(d, "totals", serde.String, serde.Int64))
	fmt.Println(d.Topics())
	// Output:
	// alice 3
	// bob 10
	// alice 5
	// map[alice:5 bob:10]
	// [purchases shop-totals-changelog totals]
}
