package runtime

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
)

// Repartition topics are the application's own: it writes them and it
// reads them, and once a record's offset is committed nothing reads it
// again. So they are created with no retention by time (a record re-keyed
// from an input months old has a timestamp months old, and the broker's
// retention would delete it before it is read, which Kafka's default of 7
// days does to any reprocessing of history), and the instance deletes what
// it has committed (DeleteRecords), every PurgeInterval, as Kafka Streams
// does.

// repartitionConfigs are the configs of a repartition topic the instance
// creates (Kafka Streams' choices: no retention by time or size, segments
// rolled every 10 minutes or 50 MB so that purged records free their space).
func repartitionConfigs() map[string]*string {
	s := func(v string) *string { return &v }
	return map[string]*string{
		"cleanup.policy":  s("delete"),
		"retention.ms":    s("-1"),
		"retention.bytes": s("-1"),
		"segment.ms":      s("600000"),
		"segment.bytes":   s("52428800"),
	}
}

// purger remembers the committed offsets of the repartition topics' partitions
// this instance reads, and deletes the records before them now and then.
type purger struct {
	topics   map[string]bool // the repartition topics, by their real names
	interval time.Duration
	last     time.Time
	upTo     map[string]map[int32]int64
}

func newPurger(t *topo.Topology, p *topicPlan, interval time.Duration) *purger {
	pg := &purger{topics: map[string]bool{}, interval: interval, last: time.Now(), upTo: map[string]map[int32]int64{}}
	for _, it := range t.InternalTopics {
		if it.Kind == topo.RepartitionTopic {
			pg.topics[p.name(topo.TopicRef{Name: it.Name, Internal: true})] = true
		}
	}
	return pg
}

// committedLocked notes the offsets a commit has just committed, for the
// partitions of repartition topics.
func (r *Runtime) committedLocked() {
	pg := r.purger
	if pg == nil || len(pg.topics) == 0 {
		return
	}
	for _, t := range r.tasks {
		for tp, q := range t.queues {
			if q.consumed < 0 || !pg.topics[tp.topic] {
				continue
			}
			if pg.upTo[tp.topic] == nil {
				pg.upTo[tp.topic] = map[int32]int64{}
			}
			pg.upTo[tp.topic][tp.partition] = q.consumed
		}
	}
}

// purgeLocked deletes the committed records of repartition topics, if the
// interval has passed since the last time. A failure is logged and tried
// again at the next interval: it costs disk, not correctness.
func (r *Runtime) purgeLocked(ctx context.Context) {
	pg := r.purger
	if pg == nil || len(pg.upTo) == 0 || time.Since(pg.last) < pg.interval {
		return
	}
	pg.last = time.Now()
	var offs kadm.Offsets
	for topic, parts := range pg.upTo {
		for p, o := range parts {
			offs.Add(kadm.Offset{Topic: topic, Partition: p, At: o, LeaderEpoch: -1})
		}
	}
	clear(pg.upTo)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resps, err := r.adm.DeleteRecords(ctx, offs)
	if err == nil {
		err = resps.Error()
	}
	if err != nil {
		r.log.Warn("could not delete the committed records of repartition topics; trying again later", "err", err)
		return
	}
	r.log.Debug("deleted the committed records of repartition topics", "partitions", len(resps))
}
