package runtime

import (
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func recAt(topic string, off int64, ms int64) *kgo.Record {
	return &kgo.Record{Topic: topic, Offset: off, Timestamp: time.UnixMilli(ms)}
}

func newTestTask(idle time.Duration, topics ...string) *rtask {
	t := &rtask{r: &Runtime{cfg: Config{MaxTaskIdle: idle}}, queues: map[topicPartition]*partQueue{}}
	for _, tp := range topics {
		q := &partQueue{consumed: -1}
		t.queues[topicPartition{tp, 0}] = q
		t.qs = append(t.qs, q)
	}
	return t
}

func (t *rtask) fill(topic string, hwm int64, recs ...*kgo.Record) {
	t.enqueue(kgo.FetchTopicPartition{Topic: topic, FetchPartition: kgo.FetchPartition{Partition: 0, HighWatermark: hwm, Records: recs}})
}

// A task picks the head with the smallest timestamp across its partitions.
func TestNextPicksSmallestTimestamp(t *testing.T) {
	task := newTestTask(0, "a", "b")
	task.fill("a", 3, recAt("a", 0, 10), recAt("a", 1, 30), recAt("a", 2, 50))
	task.fill("b", 3, recAt("b", 0, 20), recAt("b", 1, 40), recAt("b", 2, 60))
	var got []int64
	now := time.Now()
	for {
		rec, _ := task.next(now)
		if rec == nil {
			break
		}
		got = append(got, rec.Timestamp.UnixMilli())
	}
	want := []int64{10, 20, 30, 40, 50, 60}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}

// With MaxTaskIdle, a task whose other partition is empty but has data on
// the broker waits for it, up to MaxTaskIdle; a partition with nothing more
// on the broker is not waited for.
func TestNextWaitsForLaggingPartitionUpToMaxTaskIdle(t *testing.T) {
	task := newTestTask(time.Second, "a", "b")
	task.fill("a", 1, recAt("a", 0, 10))
	task.fill("b", 5) // b: nothing fetched yet, 5 records on the broker
	start := time.Unix(1000, 0)
	if rec, _ := task.next(start); rec != nil {
		t.Fatalf("processed %v while b lags and the idle time has not passed", rec.Offset)
	}
	if rec, _ := task.next(start.Add(999 * time.Millisecond)); rec != nil {
		t.Fatal("processed before MaxTaskIdle passed")
	}
	rec, _ := task.next(start.Add(time.Second))
	if rec == nil || rec.Topic != "a" {
		t.Fatalf("after MaxTaskIdle: %v, want a's record", rec)
	}

	caught := newTestTask(time.Second, "a", "b")
	caught.fill("a", 1, recAt("a", 0, 10))
	caught.fill("b", 0) // nothing on the broker for b
	if rec, _ := caught.next(start); rec == nil {
		t.Fatal("waited for a partition with nothing on the broker")
	}

	never := newTestTask(0, "a", "b")
	never.fill("a", 1, recAt("a", 0, 10))
	never.fill("b", 5)
	if rec, _ := never.next(start); rec == nil {
		t.Fatal("MaxTaskIdle 0 waited")
	}
}

// Just after an assignment, a partition that had records then holds its
// task back until its first records arrive (a join's table before its
// stream), even without MaxTaskIdle; one with nothing past the group's
// commit does not, and the wait is bounded.
func TestNextWaitsForFirstRecordsOfAssignedPartition(t *testing.T) {
	task := newTestTask(0, "stream", "table")
	task.r.times.committed = map[topicPartition]int64{{"stream", 0}: -1, {"table", 0}: -1}
	task.qs[0].tp, task.qs[1].tp = topicPartition{"stream", 0}, topicPartition{"table", 0}
	task.qs[0].endAtAssign, task.qs[1].endAtAssign = 1, 2
	task.fill("stream", 1, recAt("stream", 0, 50))
	start := time.Unix(1000, 0)
	if rec, _ := task.next(start); rec != nil {
		t.Fatalf("processed the stream's record %d before the table's first records", rec.Offset)
	}
	task.fill("table", 2, recAt("table", 0, 10), recAt("table", 1, 20))
	var got []string
	for {
		rec, _ := task.next(start)
		if rec == nil {
			break
		}
		got = append(got, rec.Topic)
	}
	if len(got) != 3 || got[0] != "table" || got[1] != "table" || got[2] != "stream" {
		t.Errorf("order %v, want the table's records first", got)
	}

	caught := newTestTask(0, "stream", "table")
	caught.r.times.committed = map[topicPartition]int64{{"table", 0}: 2}
	caught.qs[0].tp, caught.qs[1].tp = topicPartition{"stream", 0}, topicPartition{"table", 0}
	caught.qs[0].endAtAssign, caught.qs[1].endAtAssign = 1, 2
	caught.fill("stream", 1, recAt("stream", 0, 50))
	if rec, _ := caught.next(start); rec == nil {
		t.Error("waited for a partition the group had read to its end")
	}

	lost := newTestTask(0, "stream", "table")
	lost.r.log = discardLogger()
	lost.r.times.committed = map[topicPartition]int64{{"table", 0}: -1}
	lost.qs[0].tp, lost.qs[1].tp = topicPartition{"stream", 0}, topicPartition{"table", 0}
	lost.qs[0].endAtAssign, lost.qs[1].endAtAssign = 1, 2
	lost.fill("stream", 1, recAt("stream", 0, 50))
	if rec, _ := lost.next(start); rec != nil {
		t.Fatal("did not wait")
	}
	if rec, _ := lost.next(start.Add(bootstrapWait)); rec == nil {
		t.Error("waited past bootstrapWait")
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
