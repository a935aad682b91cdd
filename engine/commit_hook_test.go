package engine_test

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// receipts copies each record of in to out and, before each commit, writes
// to acks, for each record copied, where it went: "<partition>:<offset>",
// keyed by the record's value. The positions come from ForwardToProduced
// and are read in a BeforeCommit hook.
func receipts(in, out, acks string) *engine.Topology {
	b := engine.NewBuilder()
	s := engine.Process(engine.NewStream(b, in, serde.String, serde.String), func() engine.Processor[string, string, string, string] {
		return &receiptProc{}
	}, engine.Named("receipts"))
	s.Filter(func(string, string) bool { return true }, engine.Named("copy")).To(out)
	s.Filter(func(string, string) bool { return true }, engine.Named("ack")).To(acks)
	top, err := b.Build()
	if err != nil {
		panic(err)
	}
	return top
}

type receiptProc struct {
	mu      sync.Mutex
	pending []string // "<value> <partition>:<offset>"
}

func (p *receiptProc) Init(ctx *engine.ProcessorContext[string, string]) error {
	ctx.BeforeCommit(func() error {
		p.mu.Lock()
		done := p.pending
		p.pending = nil
		p.mu.Unlock()
		for _, d := range done {
			v, pos, _ := strings.Cut(d, " ")
			if err := ctx.ForwardTo("ack", engine.Record[string, string]{Key: v, Value: pos, Timestamp: ctx.StreamTime()}); err != nil {
				return err
			}
		}
		return nil
	})
	return nil
}

func (p *receiptProc) Process(ctx *engine.ProcessorContext[string, string], rec engine.Record[string, string]) error {
	v := rec.Value
	return ctx.ForwardToProduced("copy", rec, func(partition int32, offset int64) {
		p.mu.Lock()
		p.pending = append(p.pending, fmt.Sprintf("%s %d:%d", v, partition, offset))
		p.mu.Unlock()
	})
}

// In the driver every record is acknowledged at once; the hook runs after
// each piped record.
func TestBeforeCommitHookInDriver(t *testing.T) {
	d := enginetest.New(t, receipts("in", "out", "acks"))
	in := enginetest.NewInput(d, "in", serde.String, serde.String)
	in.Pipe("k", "a", enginetest.At(1))
	in.Pipe("k", "b", enginetest.At(2))
	got := enginetest.NewOutput(d, "acks", serde.String, serde.String).ReadKeyValues()
	want := []engine.KeyValue[string, string]{engine.KV("a", "0:0"), engine.KV("b", "0:1")}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("acks %v, want %v", got, want)
	}
}

// On a broker, under both guarantees, each acknowledgement names the
// partition and offset where its record is in the output topic, and is
// committed with it.
func TestBeforeCommitHookOnKafka(t *testing.T) {
	for _, g := range []engine.Guarantee{engine.AtLeastOnce, engine.ExactlyOnce} {
		t.Run(map[engine.Guarantee]string{engine.AtLeastOnce: "at-least-once", engine.ExactlyOnce: "exactly-once"}[g], func(t *testing.T) {
			k := newKT(t)
			in, out, acks := k.topic("in"), k.topic("out"), k.topic("acks")
			k.create(3, in, out, acks)
			k.start(receipts(in, out, acks), engine.Config{Guarantee: g})
			const n = 300
			var recs []*kgo.Record
			for i := range n {
				recs = append(recs, &kgo.Record{Key: []byte("k" + strconv.Itoa(i%7)), Value: []byte("v" + strconv.Itoa(i))})
			}
			k.produce(in, recs...)
			copies := map[string]string{} // "<partition>:<offset>" -> value
			for _, r := range k.records(out, n, time.Minute) {
				copies[fmt.Sprintf("%d:%d", r.Partition, r.Offset)] = string(r.Value)
			}
			seen := map[string]bool{}
			for _, r := range k.records(acks, n, time.Minute) {
				v, pos := string(r.Key), string(r.Value)
				if copies[pos] != v {
					t.Errorf("the ack of %s says %s, which holds %q", v, pos, copies[pos])
				}
				seen[v] = true
			}
			if len(seen) != n {
				t.Errorf("%d records acknowledged, want %d", len(seen), n)
			}
		})
	}
}
