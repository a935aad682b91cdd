package runtime

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
)

// collector sends a task's output records and remembers, for each changelog
// partition, the offset after the last record Kafka acknowledged, and the
// first production error since the last commit.
type collector struct {
	r       *Runtime
	t       *rtask
	span    trace.SpanContext
	rr      uint32
	promise func(*kgo.Record, error)
	// slab hands out the records Send produces, one allocation for
	// recordSlab of them instead of one each; a slab lives until franz-go
	// has acknowledged all its records. (A sync.Pool measured slower: the
	// records are put back on franz-go's goroutines and taken on the
	// workers'.) Only the task's goroutine sends.
	slab []kgo.Record
	// lastTopic and lastN memoize the partition count of the topic sent to
	// last.
	lastTopic string
	lastN     int32

	// sent counts the records produced since the last commit (only the
	// task's worker sends; the commit reads and resets it between rounds).
	sent int64

	mu       sync.Mutex
	logEnd   map[topicPartition]int64
	err      error
	internal bool // err concerns an internal topic
	inflight sync.WaitGroup
}

func newCollector(r *Runtime, t *rtask) *collector {
	c := &collector{r: r, t: t, logEnd: map[topicPartition]int64{}}
	c.promise = c.produced
	return c
}

// Send produces a record, or a copy of it to each partition its sink's
// partitioner chose; it implements topo.Collector.
func (c *collector) Send(out topo.Output) error {
	p := out.Partition
	if p == topo.AnyPartition {
		n := c.lastN
		if out.Topic != c.lastTopic {
			n = c.r.plan.partitions[out.Topic]
			c.lastTopic, c.lastN = out.Topic, n
		}
		if n == 0 {
			return fmt.Errorf("engine: no partition count known for topic %s", out.Topic)
		}
		if out.Partitions != nil {
			ps, err := out.Targets(n)
			if err != nil {
				return err
			}
			if len(ps) > 0 {
				c.multicast(out, ps)
				return nil
			}
		}
		if out.Key != nil {
			p = partitionFor(out.Key, n)
		} else {
			c.rr++
			p = int32(c.rr % uint32(n))
		}
	}
	c.produce(out, p)
	return nil
}

// multicast produces a copy of out to each of the partitions its
// partitioner chose; only the first copy reports to out.Produced, which
// expects one call.
func (c *collector) multicast(out topo.Output, ps []int32) {
	for i, p := range ps {
		if i == 1 {
			out.Produced = nil
		}
		c.produce(out, p)
	}
}

// produce produces out to partition p.
func (c *collector) produce(out topo.Output, p int32) {
	if len(c.slab) == 0 {
		c.slab = make([]kgo.Record, recordSlab)
	}
	rec := &c.slab[0]
	c.slab = c.slab[1:]
	*rec = kgo.Record{Topic: out.Topic, Partition: p, Key: out.Key, Value: out.Value, Timestamp: topo.TimeOf(out.Timestamp)}
	if out.Produced != nil {
		rec.Context = context.WithValue(context.Background(), producedKey{}, out.Produced)
	}
	if len(out.Headers) > 0 || c.span.IsValid() {
		hs := slices.Clone(out.Headers)
		if c.span.IsValid() {
			propagator.Inject(trace.ContextWithSpanContext(context.Background(), c.span), headerCarrier{&hs})
		}
		rec.Headers = make([]kgo.RecordHeader, len(hs))
		for i, h := range hs {
			rec.Headers[i] = kgo.RecordHeader{Key: h.Key, Value: h.Value}
		}
	}
	// A record larger than the producer's batch limit (franz-go's default
	// is Kafka's 1 MB) fails on its own, before it can share a batch with
	// others; raising that limit above the broker's makes a too-large
	// record fail its whole batch.
	c.inflight.Add(1)
	c.sent++
	c.r.cl.Produce(context.Background(), rec, c.promise)
}

const recordSlab = 256

// producedKey keys a record's topo.Output.Produced in its context.
type producedKey struct{}

// produced is the promise of every record the collector sends (made once,
// as c.promise, so that producing does not allocate a closure per record).
func (c *collector) produced(rec *kgo.Record, err error) {
	defer c.inflight.Done()
	if err == nil && rec.Context != nil {
		if fn, ok := rec.Context.Value(producedKey{}).(func(int32, int64)); ok {
			c.callProduced(fn, rec)
		}
	}
	if err == nil && !c.isChangelog(rec.Topic) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		if c.err == nil {
			c.err = fmt.Errorf("engine: produce to %s[%d]: %w", rec.Topic, rec.Partition, err)
		}
		// Losing a changelog or repartition record would make state and the
		// topics disagree: no policy skips that.
		c.internal = c.internal || strings.HasPrefix(rec.Topic, c.r.cfg.Group+"-")
		return
	}
	tp := topicPartition{rec.Topic, rec.Partition}
	c.logEnd[tp] = max(c.logEnd[tp], rec.Offset+1)
}

func (c *collector) isChangelog(topic string) bool {
	for _, l := range c.t.logged {
		if l.changelog == topic {
			return true
		}
	}
	return false
}

// callProduced calls the callback of ForwardToProduced: user code, on the
// client's goroutine, where a panic would end the process. It fails the
// commit instead, as a lost record of an internal topic does: no policy
// skips it.
func (c *collector) callProduced(fn func(int32, int64), rec *kgo.Record) {
	defer func() {
		if p := recover(); p != nil {
			where := "task " + c.t.id.String() + ": the callback of ForwardToProduced"
			err := fmt.Errorf("engine: %s: %w", where, c.r.panicked(p, where))
			c.mu.Lock()
			if c.err == nil {
				c.err = err
			}
			c.internal = true
			c.mu.Unlock()
		}
	}()
	fn(rec.Partition, rec.Offset)
}

// takeErr returns and clears the first production error, and whether any
// failed record was for an internal topic.
func (c *collector) takeErr() (err error, internal bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	err, internal = c.err, c.internal
	c.err, c.internal = nil, false
	return err, internal
}
