package engine_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/internal/await"
)

// A new instance does not take a task whose state it lacks: at the defaults
// (two warm-up replicas, 10,000 records of acceptable lag) the task stays
// with its owner while the new instance warms up a copy, and moves once the
// copy has caught up, when its restore is the last few records. Without
// warm-ups the new owner restores the whole changelog before it processes.
func TestAppWarmupBeforeMove(t *testing.T) {
	for _, c := range []struct {
		name    string
		warmups int
	}{{"defaults", 0}, {"without warm-ups", -1}} {
		t.Run(c.name, func(t *testing.T) {
			k := newKT(t)
			in, out := k.topic("in"), k.topic("out")
			k.create(2, in, out)
			top := countByKey(in, out)
			a := k.start(top, engine.Config{InstanceID: "a", MaxWarmupReplicas: c.warmups})
			waitRunning(t, k, a)
			// About 15,000 keys a partition: each task's changelog holds
			// more than the acceptable lag.
			const n, keys = 60000, 30000
			k.produce(in, keyed(0, n, keys)...)
			waitInputCommitted(t, k)
			if end := k.changelogEnd(a.App, "counts"); end < 2*12000 {
				t.Fatalf("the changelog holds %d records; the test needs more than 12,000 a task", end)
			}
			b := k.start(top, engine.Config{InstanceID: "b", MaxWarmupReplicas: c.warmups})
			// The group, not the plan: b consumes one partition of the input.
			await.Until(t, 2*time.Minute, "b to consume one input partition", func() bool {
				k.checkApps()
				return len(k.assignedTo("b", in)) == 1 && len(k.assignedTo("a", in)) == 1
			})
			// Every record counted once through the move; b processes its
			// partition, so its restore is over.
			k.produce(in, keyed(n, 2000, keys)...)
			want := wantCounts(n+2000, keys)
			got := k.table(out, 60*time.Second, func(m map[string]int64) bool { return maps.Equal(m, want) })
			if !maps.Equal(got, want) {
				t.Fatalf("counts differ from the input: %d keys, want %d", len(got), len(want))
			}
			restored, warmed := b.RestoredRecords(), b.StandbyRecords()
			t.Logf("b restored %d records as active, %d as a warm-up", restored, warmed)
			if c.warmups >= 0 {
				if warmed < 12000 {
					t.Errorf("b applied %d changelog records as a warm-up; want the task's changelog (over 12,000)", warmed)
				}
				if restored > 10000 {
					t.Errorf("b restored %d records after the task moved; want at most the acceptable lag (10,000)", restored)
				}
			} else if restored < 12000 || warmed != 0 {
				t.Errorf("without warm-ups b restored %d records as active and %d as a warm-up; want the whole changelog as active", restored, warmed)
			}
		})
	}
}

// assignedTo lists the partitions of topic the group has assigned to the
// member with instance id id (DescribeGroups: what it consumes, not the
// plan).
func (k *kt) assignedTo(id, topic string) []int32 {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gs, err := k.adm.DescribeGroups(ctx, k.prefix)
	if err != nil {
		return nil
	}
	for _, m := range gs[k.prefix].Members {
		if m.InstanceID == nil || *m.InstanceID != id {
			continue
		}
		if ca, ok := m.Assigned.AsConsumer(); ok {
			for _, at := range ca.Topics {
				if at.Topic == topic {
					return at.Partitions
				}
			}
		}
	}
	return nil
}
