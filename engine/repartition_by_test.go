package engine_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// RepartitionBy: a partition function chooses where each record of a
// repartition goes, one partition, several (a copy to each) or none (by the
// key). Helpers of this file are prefixed with "rb".

// rbPartition is the partition function of these tests, by the record's
// value: "broadcast" goes to every partition (the first twice, which must
// still write it once), "last" to the last partition, "outside" to the
// partition after the last, and everything else, tombstones included, by
// its key.
func rbPartition(_ string, v string, n int) []int {
	switch v {
	case "broadcast":
		all := []int{0}
		for p := range n {
			all = append(all, p)
		}
		return all
	case "last":
		return []int{n - 1}
	case "outside":
		return []int{n}
	}
	return nil
}

// rbCall is what the partition function was given.
type rbCall struct {
	key, value string
	n          int
}

// rbTopology repartitions "in" by rbPartition through the topic
// "rb-repartition", recording each call in calls if it is not nil, and
// writes what it reads back to "out" with its value upper-cased.
func rbTopology(t *testing.T, calls *[]rbCall, opts ...engine.Option) *engine.Topology {
	t.Helper()
	b := engine.NewBuilder()
	s := engine.NewStream(b, "in", serde.String, serde.String).RepartitionBy(func(k, v string, n int) []int {
		if calls != nil {
			*calls = append(*calls, rbCall{k, v, n})
		}
		return rbPartition(k, v, n)
	}, append([]engine.Option{engine.Named("rb")}, opts...)...)
	engine.MapValues(s, func(_ string, v string) string { return strings.ToUpper(v) }).To("out")
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return top
}

// In the driver every topic has one partition: the function is asked to
// choose among one, a broadcast is written once, and a partition other than
// 0 fails the record with an error naming the topic, the partition and the
// count. Both the fused line and the generic path honour the function.
func TestRepartitionByDriver(t *testing.T) {
	for _, fused := range []bool{true, false} {
		t.Run(map[bool]string{true: "fused", false: "unfused"}[fused], func(t *testing.T) {
			var calls []rbCall
			top := rbTopology(t, &calls)
			if got := engine.FusedSources(top); len(got) != 2 {
				t.Fatalf("fused sources %v, want both: the fused case would test nothing", got)
			}
			if !fused {
				top = engine.Unfused(top)
			}
			d := enginetest.New(t, top)
			in := enginetest.NewInput(d, "in", serde.String, serde.String)
			out := enginetest.NewOutput(d, "out", serde.String, serde.String)
			rt := enginetest.NewOutput(d, d.InternalTopic("rb-repartition"), serde.String, serde.String)

			in.Pipe("a", "x", enginetest.At(1))
			in.Pipe("b", "broadcast", enginetest.At(2))
			in.Pipe("c", "last", enginetest.At(3))
			in.Delete("d", enginetest.At(4))
			err := in.TryPipe("e", "outside", enginetest.At(5))
			in.Pipe("f", "y", enginetest.At(6))

			if err == nil {
				t.Fatal("a partition outside the topic was accepted")
			}
			for _, want := range []string{"test-rb-repartition", "partition 1", "[0, 1)"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error %q does not say %q", err, want)
				}
			}
			wantCalls := []rbCall{{"a", "x", 1}, {"b", "broadcast", 1}, {"c", "last", 1}, {"d", "", 1}, {"e", "outside", 1}, {"f", "y", 1}}
			if !slices.Equal(calls, wantCalls) {
				t.Errorf("the function was called with %v, want %v", calls, wantCalls)
			}
			wantRT := []engine.Record[string, string]{
				{Key: "a", Value: "x", Timestamp: enginetest.At(1)},
				{Key: "b", Value: "broadcast", Timestamp: enginetest.At(2)},
				{Key: "c", Value: "last", Timestamp: enginetest.At(3)},
				{Key: "d", Tombstone: true, Timestamp: enginetest.At(4)},
				{Key: "f", Value: "y", Timestamp: enginetest.At(6)},
			}
			if got := rt.ReadRecords(); !slices.EqualFunc(got, wantRT, rbSameRecord) {
				t.Errorf("repartition topic:\n got %v\nwant %v", got, wantRT)
			}
			wantOut := []engine.Record[string, string]{
				{Key: "a", Value: "X", Timestamp: enginetest.At(1)},
				{Key: "b", Value: "BROADCAST", Timestamp: enginetest.At(2)},
				{Key: "c", Value: "LAST", Timestamp: enginetest.At(3)},
				{Key: "d", Tombstone: true, Timestamp: enginetest.At(4)},
				{Key: "f", Value: "Y", Timestamp: enginetest.At(6)},
			}
			if got := out.ReadRecords(); !slices.EqualFunc(got, wantOut, rbSameRecord) {
				t.Errorf("out:\n got %v\nwant %v", got, wantOut)
			}
		})
	}
}

func rbSameRecord(a, b engine.Record[string, string]) bool {
	return a.Key == b.Key && a.Value == b.Value && a.Tombstone == b.Tombstone && a.Timestamp.Equal(b.Timestamp)
}

// The repartition sink says in the description that a function partitions
// it, and is part of the input's fused line.
func TestRepartitionByDescribeAndFusion(t *testing.T) {
	top := rbTopology(t, nil)
	desc := top.Describe()
	if want := "Sink: rb-sink (topic: ${app}-rb-repartition, partitioned by a function)"; !strings.Contains(desc, want) {
		t.Errorf("the description lacks %q:\n%s", want, desc)
	}
	if got := engine.FusedSources(top); len(got) != 2 || !slices.Contains(got, "rb-source") {
		t.Errorf("fused sources %v, want the input's source and rb-source", got)
	}
}

// On a broker, with three input partitions and four repartition
// partitions: a broadcast is in every partition of the repartition topic
// once, a record sent to the last partition is there only, and every other
// record is in the partition its key hashes to. Each copy is processed
// downstream.
func TestRepartitionByOnKafka(t *testing.T) {
	for _, fused := range []bool{true, false} {
		t.Run(map[bool]string{true: "fused", false: "unfused"}[fused], func(t *testing.T) {
			k := newKT(t)
			in, out := k.topic("in"), k.topic("out")
			k.create(3, in, out)
			b := engine.NewBuilder()
			s := engine.NewStream(b, in, serde.String, serde.String).RepartitionBy(rbPartition, engine.Named("rb"), engine.Partitions(4))
			engine.MapValues(s, func(_ string, v string) string { return strings.ToUpper(v) }).To(out)
			top, err := b.Build()
			if err != nil {
				t.Fatal(err)
			}
			if !fused {
				top = engine.Unfused(top)
			}
			// The repartition topic's records stay, to be read below.
			k.start(top, engine.Config{PurgeInterval: time.Hour})

			var recs []*kgo.Record
			want := map[int32][]string{} // partition of the repartition topic -> "key=value"s
			for i := range 12 {
				key := fmt.Sprintf("k%d", i)
				recs = append(recs, &kgo.Record{Key: []byte(key), Value: []byte("v")})
				p := kafkaPartition([]byte(key), 4)
				want[p] = append(want[p], key+"=v")
			}
			recs = append(recs, &kgo.Record{Key: []byte("b"), Value: []byte("broadcast")}, &kgo.Record{Key: []byte("l"), Value: []byte("last")})
			for p := range int32(4) {
				want[p] = append(want[p], "b=broadcast")
			}
			want[3] = append(want[3], "l=last")
			k.produce(in, recs...)
			total := 12 + 4 + 1

			// Every copy reaches the output: each was read back and processed.
			gotOut := map[string]int{}
			for _, r := range k.records(out, total, 60*time.Second) {
				gotOut[string(r.Key)+"="+string(r.Value)]++
			}
			if gotOut["b=BROADCAST"] != 4 || gotOut["l=LAST"] != 1 || gotOut["k0=V"] != 1 || len(gotOut) != 14 {
				t.Errorf("output records, by how many times each came: %v", gotOut)
			}

			// Read to its end, the repartition topic holds each copy once,
			// besides the position markers the commits write (whether a
			// commit came between the records depends on timing).
			rt := k.prefix + "-rb-repartition"
			got := map[int32][]string{}
			for _, r := range k.committedRecords(rt) {
				if !isPositionMarker(r) {
					got[r.Partition] = append(got[r.Partition], string(r.Key)+"="+string(r.Value))
				}
			}
			for p := range int32(4) {
				slices.Sort(got[p])
				slices.Sort(want[p])
				if !slices.Equal(got[p], want[p]) {
					t.Errorf("partition %d of the repartition topic holds %v, want %v", p, got[p], want[p])
				}
			}
			if len(got) != 4 {
				t.Errorf("the repartition topic has records in partitions %v", slices.Sorted(maps.Keys(got)))
			}
		})
	}
}

// On a broker, a partition outside the repartition topic fails the task:
// the instance stops with the error.
func TestRepartitionByOutsideOnKafka(t *testing.T) {
	k := newKT(t)
	in, out := k.topic("in"), k.topic("out")
	k.create(2, in, out)
	b := engine.NewBuilder()
	engine.NewStream(b, in, serde.String, serde.String).RepartitionBy(rbPartition, engine.Named("rb"), engine.Partitions(3)).To(out)
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	a := k.start(top, engine.Config{})
	k.produce(in, &kgo.Record{Key: []byte("e"), Value: []byte("outside")})
	select {
	case err := <-a.done:
		a.done <- err
		if err == nil {
			t.Fatal("the instance stopped without an error")
		}
		t.Logf("the instance stopped with: %v", err)
		for _, want := range []string{k.prefix + "-rb-repartition", "partition 3", "[0, 3)"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the error %q does not say %q", err, want)
			}
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the instance still runs 60s after a record was sent outside the topic")
	}
}
