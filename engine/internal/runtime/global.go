package runtime

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine/internal/state"
	"github.com/oxbow-dev/oxbow/engine/internal/topo"
)

// globalTask keeps the global tables: every partition of their topics, on
// every instance. They are read to their end before the instance processes
// anything, then kept current each round. Their topics are their changelogs:
// the local checkpoint is the position in the topic itself.
type globalTask struct {
	r     *Runtime
	subs  []*topo.SubTopology
	cl    *kgo.Client
	tasks map[string]*topo.Task // by topic: each global table reads one
	st    *state.Task
	parts map[topicPartition]bool
	dirty bool
	// read: per partition, the offset after the last record applied, made
	// known to StorePositions at each commit.
	read map[topicPartition]int64
}

// globalPartition is the store partition under which a global store is kept.
const globalPartition = 0

func newGlobalTask(r *Runtime, subs []*topo.SubTopology, base []kgo.Opt) (*globalTask, error) {
	g := &globalTask{r: r, subs: subs, st: r.db.Task(), tasks: map[string]*topo.Task{}, parts: map[topicPartition]bool{}}
	consume := map[string]map[int32]kgo.Offset{}
	for _, sub := range subs {
		t, err := topo.NewTask(topo.TaskConfig{
			ID:        topo.TaskID{Sub: sub.ID, Partition: globalPartition},
			Topology:  r.topo,
			Sub:       sub,
			TopicName: r.plan.name,
			OpenStore: func(spec *topo.StoreSpec, id topo.TaskID) (topo.KVStore, error) {
				return g.st.OpenStore(spec, id)
			},
			Collector: collectorFunc(func(topo.Output) error {
				return errors.New("engine: a global table does not produce records")
			}),
			Now:    r.cfg.Now,
			Logger: r.log,
			OnDecodeError: func(in topo.Input, err error) error {
				if r.cfg.OnDecodeError == Fail || !recordsFault(err) {
					return err
				}
				r.log.Warn("skipped a global table record that cannot be decoded", "topic", in.Topic, "partition", in.Partition, "offset", in.Offset, "err", err)
				r.m.dropped(context.Background(), "decode")
				return nil
			},
		})
		if err != nil {
			r.noteIfPanic(err, "global table")
			g.close()
			return nil, err
		}
		for ref := range sub.Sources {
			topic := r.plan.name(ref)
			g.tasks[topic] = t
			consume[topic] = map[int32]kgo.Offset{}
			for p := range r.plan.partitions[topic] {
				off := kgo.NewOffset().AtStart()
				ckpt, ok, err := r.db.Checkpoint(topic, p)
				if err != nil {
					g.close()
					return nil, err
				}
				if ok {
					off = kgo.NewOffset().At(ckpt)
				}
				consume[topic][p] = off
				g.parts[topicPartition{topic, p}] = true
			}
		}
	}
	var err error
	g.cl, err = kgo.NewClient(append(base, kgo.ConsumePartitions(consume), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())...)
	if err != nil {
		g.close()
		return nil, fmt.Errorf("engine: global table client: %w", err)
	}
	return g, nil
}

type collectorFunc func(topo.Output) error

func (f collectorFunc) Send(o topo.Output) error { return f(o) }

// bootstrap reads every global topic to the end offsets it has now.
func (g *globalTask) bootstrap(ctx context.Context) error {
	var topics []string
	for topic := range g.tasks {
		topics = append(topics, topic)
	}
	ends, err := g.r.adm.ListCommittedOffsets(ctx, topics...)
	if err != nil {
		return fmt.Errorf("engine: global tables: end offsets: %w", err)
	}
	pos := map[topicPartition]int64{}
	for tp := range g.parts {
		ckpt, _, err := g.r.db.Checkpoint(tp.topic, tp.partition)
		if err != nil {
			return err
		}
		pos[tp] = ckpt
	}
	behind := func() bool {
		for tp := range g.parts {
			if e, ok := ends.Lookup(tp.topic, tp.partition); ok && pos[tp] < e.Offset {
				return true
			}
		}
		return false
	}
	g.r.setState(Restoring)
	// Positions move past transaction markers too (the client keeps control
	// records), so they reach the last stable offsets exactly. A partition
	// whose records retention deleted has nothing to move them: after a few
	// empty polls the topics count as read.
	for idle := 0; behind() && idle < 4; {
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fetches := g.cl.PollRecords(pctx, 10000)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if fetches.NumRecords() == 0 {
			idle++
		} else {
			idle = 0
		}
		if err := g.apply(fetches, pos); err != nil {
			return err
		}
	}
	// Where the tables stand, known before any record arrives.
	g.read, g.dirty = maps.Clone(pos), true
	return g.commit()
}

// poll applies what arrived since the last round, without waiting.
func (g *globalTask) poll(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, time.Millisecond)
	fetches := g.cl.PollRecords(pctx, 10000)
	cancel()
	if err := g.apply(fetches, nil); err != nil {
		return err
	}
	return g.commit()
}

// apply processes fetched records of the global tables. Their serdes are
// user code: a panic in them fails the instance, as a *PanicError.
func (g *globalTask) apply(fetches kgo.Fetches, pos map[topicPartition]int64) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("engine: global table: %w", g.r.panicked(p, "global table"))
		}
	}()
	if err := g.r.fetchErrors(fetches, "global table"); err != nil {
		return err
	}
	var perr error
	fetches.EachRecord(func(rec *kgo.Record) {
		if perr != nil {
			return
		}
		if pos != nil {
			pos[topicPartition{rec.Topic, rec.Partition}] = rec.Offset + 1
		}
		if g.read == nil {
			g.read = map[topicPartition]int64{}
		}
		g.read[topicPartition{rec.Topic, rec.Partition}] = rec.Offset + 1
		if rec.Attrs.IsControl() {
			// A transaction marker: past it, but nothing to process.
			perr = g.st.SetCheckpoint(rec.Topic, rec.Partition, rec.Offset+1)
			g.dirty = true
			return
		}
		in := topo.Input{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Key: rec.Key, Value: rec.Value, Timestamp: rec.Timestamp.UnixMilli()}
		if perr = g.tasks[rec.Topic].Process(in); perr != nil {
			perr = fmt.Errorf("engine: global table %s[%d]@%d: %w", rec.Topic, rec.Partition, rec.Offset, perr)
			return
		}
		perr = g.st.SetCheckpoint(rec.Topic, rec.Partition, rec.Offset+1)
		g.dirty = true
	})
	return perr
}

func (g *globalTask) commit() error {
	if !g.dirty {
		return nil
	}
	g.dirty = false
	if err := g.st.Commit(); err != nil {
		return err
	}
	if err := g.r.db.Sync(); err != nil {
		return err
	}
	g.r.posMu.Lock()
	if g.r.globalPos == nil {
		g.r.globalPos = map[topicPartition]int64{}
	}
	maps.Copy(g.r.globalPos, g.read)
	g.r.posMu.Unlock()
	return nil
}

func (g *globalTask) close() {
	if g.cl != nil {
		g.cl.Close()
	}
	for _, t := range g.tasks {
		g.r.closeTask(t)
	}
	g.st.Close()
}
