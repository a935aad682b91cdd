package hanging_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine/hanging"
	"github.com/oxbow-dev/oxbow/engine/hanging/hangingtest"
	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
	"github.com/oxbow-dev/oxbow/internal/await"
)

// TestFindAndRepair makes one hanging transaction of each kind on a real
// broker and checks what Find decides, what Repair writes and what a
// read-committed consumer then sees.
// (hangingtest says how.)
func TestFindAndRepair(t *testing.T) {
	env := kafkaenv.Real(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close) // after verificationOff's cleanup
	adm := kadm.NewClient(cl)
	hangingtest.VerificationOff(ctx, t, adm)

	topic := fmt.Sprintf("hanging-%d", time.Now().UnixNano())
	env.CreateTopics(t, 5, topic)
	defer func() { _, _ = adm.DeleteTopics(context.Background(), topic) }()

	raw, err := hangingtest.Client(env.Brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()

	// Partition 1: the coordinator committed, partition 0 got its marker.
	committed := hangingtest.LeaveOpen(ctx, t, raw, topic+"-commit", hangingtest.Partition{Topic: topic}, hangingtest.Partition{Topic: topic, Partition: 1}, "c", true)
	// Partition 2: the coordinator aborted.
	aborted := hangingtest.LeaveOpen(ctx, t, raw, topic+"-abort", hangingtest.Partition{Topic: topic}, hangingtest.Partition{Topic: topic, Partition: 2}, "a", false)
	// Partition 3: a transaction its coordinator never had, left past its
	// timeout.
	const shortTimeout = 8 * time.Second
	forgotten := hangingtest.Init(ctx, t, raw, topic+"-timeout", int32(shortTimeout/time.Millisecond))
	forgotten.Produce(ctx, t, topic, 3, "t3")
	// Partition 4: a producer no coordinator knows.
	ghost := hangingtest.Ghost(ctx, t, raw, topic+"-ghost", hangingtest.Partition{Topic: topic, Partition: 4}, "g")
	defer ghost.AbortOn(context.Background(), t, topic, 4) // leave nothing hanging

	found, err := hanging.Find(ctx, cl, topic)
	if err != nil {
		t.Fatal(err)
	}
	// Partition 3 is not hanging yet: a producer may still add it.
	want := map[int32]hanging.Decision{1: hanging.Commit, 2: hanging.Abort, 4: hanging.Refuse}
	checkFound(t, found, want, committed, aborted, ghost)

	await.Until(t, time.Minute, "partition 3 to hang past its transaction timeout", func() bool {
		found, err = hanging.Find(ctx, cl, topic)
		if err != nil {
			t.Fatal(err)
		}
		return len(found) == 4
	})
	want[3] = hanging.Abort
	checkFound(t, found, want, committed, aborted, ghost)
	for _, f := range found {
		if f.Partition == 3 && !strings.Contains(f.Reason, "past the transaction timeout") {
			t.Errorf("partition 3's reason: %q", f.Reason)
		}
		if f.Partition == 4 && (!strings.Contains(f.Reason, "no coordinator lists the producer") || !strings.Contains(f.Remedy(), "kafka-transactions.sh abort")) {
			t.Errorf("partition 4's reason and remedy: %q, %q", f.Reason, f.Remedy())
		}
	}

	repaired, err := hanging.Repair(ctx, cl, found)
	if err != nil {
		t.Fatal(err)
	}
	var parts []int32
	for _, r := range repaired {
		parts = append(parts, r.Partition)
	}
	if !slices.Equal(parts, []int32{1, 2, 3}) {
		t.Fatalf("repaired partitions %v, want [1 2 3]", parts)
	}
	left, err := hanging.Find(ctx, cl, topic)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 || left[0].Partition != 4 || left[0].Decision != hanging.Refuse {
		t.Fatalf("left after the repair: %v, want partition 4 refused", left)
	}

	// Read committed, the committed transaction's records are all there,
	// the aborted and timed-out ones are not, and every repaired
	// partition reads to its end.
	got := readCommitted(ctx, t, cl, topic, 0, 1, 2, 3)
	if want := []string{"c", "c"}; !slices.Equal(got, want) {
		t.Fatalf("read committed: %v, want %v", got, want)
	}
}

func checkFound(t *testing.T, found []hanging.Txn, want map[int32]hanging.Decision, committed, aborted, ghost *hangingtest.Producer) {
	t.Helper()
	var got []string
	for _, f := range found {
		got = append(got, fmt.Sprintf("%d:%s", f.Partition, f.Decision))
		t.Logf("found: %v", f)
	}
	var exp []string
	for _, p := range []int32{1, 2, 3, 4} {
		if d, ok := want[p]; ok {
			exp = append(exp, fmt.Sprintf("%d:%s", p, d))
		}
	}
	if !slices.Equal(got, exp) {
		t.Fatalf("found %v, want %v", got, exp)
	}
	for _, f := range found {
		switch f.Partition {
		case 1:
			if f.ProducerID != committed.ID || f.TxnID != committed.TxnID || f.State != "CompleteCommit" || f.MarkerEpoch != committed.Epoch {
				t.Errorf("partition 1: %+v", f)
			}
		case 2:
			if f.ProducerID != aborted.ID || f.State != "CompleteAbort" || f.MarkerEpoch != aborted.Epoch {
				t.Errorf("partition 2: %+v", f)
			}
		case 4:
			if f.ProducerID != ghost.ID || f.TxnID != "" {
				t.Errorf("partition 4: %+v", f)
			}
		}
	}
}

// readCommitted reads partitions of topic to their end, read committed,
// and returns the values in partition order.
func readCommitted(ctx context.Context, t *testing.T, cl *kgo.Client, topic string, partitions ...int32) []string {
	t.Helper()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	offsets := map[int32]kgo.Offset{}
	remaining := map[int32]int64{}
	for _, p := range partitions {
		offsets[p] = kgo.NewOffset().AtStart()
		if o, ok := ends.Lookup(topic, p); ok && o.Offset > 0 {
			remaining[p] = o.Offset
		}
	}
	rd, err := kgo.NewClient(kgo.SeedBrokers(cl.OptValue(kgo.SeedBrokers).([]string)...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	got := map[int32][]string{}
	for len(remaining) > 0 {
		fs := rd.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s read committed: %v short of its end (%v)", topic, remaining, got)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset+1 >= remaining[r.Partition] {
				delete(remaining, r.Partition)
			}
			if !r.Attrs.IsControl() {
				got[r.Partition] = append(got[r.Partition], string(r.Value))
			}
		})
	}
	var out []string
	for _, p := range partitions {
		out = append(out, got[p]...)
	}
	return out
}

// TestReadable: a read-committed reader at the offset after a
// transaction's last record has nothing to read, the marker only; nor
// does one before an aborted transaction; one before committed records
// does.
func TestReadable(t *testing.T) {
	env := kafkaenv.Real(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	topic := fmt.Sprintf("readable-%d", time.Now().UnixNano())
	env.CreateTopics(t, 1, topic)
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...), kgo.TransactionalID(topic), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	defer func() { _, _ = kadm.NewClient(cl).DeleteTopics(context.Background(), topic) }()
	txn := func(commit bool, values ...string) {
		t.Helper()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for _, v := range values {
			if err := cl.ProduceSync(ctx, kgo.StringRecord(v)).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	end := func() int64 {
		t.Helper()
		ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		o, _ := ends.Lookup(topic, 0)
		return o.Offset
	}
	readable := func(from, to int64) bool {
		t.Helper()
		ok, err := hanging.Readable(ctx, cl, topic, 0, from, to)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	// The markers are written after EndTransaction returns.
	ended := func(want int64) {
		t.Helper()
		await.Until(t, 30*time.Second, fmt.Sprintf("the end at %d", want), func() bool { return end() == want })
	}
	txn(true, "a", "b") // offsets 0, 1; the marker 2
	ended(3)
	if !readable(0, 3) || !readable(1, 3) || readable(2, 3) || readable(3, 3) {
		t.Fatalf("after a committed transaction: readable from 0, 1 and not from 2, 3: %v %v %v %v", readable(0, 3), readable(1, 3), readable(2, 3), readable(3, 3))
	}
	txn(false, "c", "d", "e") // aborted: 3–5, the marker 6
	ended(7)
	if readable(2, 7) {
		t.Fatal("an aborted transaction's records are readable")
	}
	txn(true, "f") // 7, the marker 8
	ended(9)
	if !readable(2, 9) || readable(8, 9) {
		t.Fatalf("past an aborted transaction: readable from 2 %v (want true), from 8 %v (want false)", readable(2, 9), readable(8, 9))
	}
}
