package engine_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/internal/await"
)

// A repartition topic keeps records whatever their timestamps (no
// retention by time: these are months old), and the instance deletes the
// records it has committed, so the topic does not grow without end.
func TestRepartitionPurged(t *testing.T) {
	for name, g := range map[string]engine.Guarantee{"at-least-once": engine.AtLeastOnce, "exactly-once": engine.ExactlyOnce} {
		t.Run(name, func(t *testing.T) {
			k := newKT(t)
			in, out := k.topic("in"), k.topic("out")
			k.create(2, in, out)
			b := engine.NewBuilder()
			engine.Map(engine.NewStream(b, in, serde.String, serde.String), func(k, v string) (string, string) { return v, k }).
				Repartition(engine.Named("by-value")).To(out)
			top, err := b.Build()
			if err != nil {
				t.Fatal(err)
			}
			var recs []*kgo.Record
			for i := range 200 {
				recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i%7), Timestamp: enginetest.Epoch})
			}
			k.produce(in, recs...)
			a := k.start(top, engine.Config{Guarantee: g, PurgeInterval: 50 * time.Millisecond})
			k.records(out, 200, 60*time.Second)

			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			topics, err := k.adm.ListTopics(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var rp string
			for name := range topics {
				if strings.HasPrefix(name, k.prefix) && strings.HasSuffix(name, "-repartition") {
					rp = name
				}
			}
			if rp == "" {
				t.Fatalf("no repartition topic among %v", topics.Names())
			}
			cfgs, err := k.adm.DescribeTopicConfigs(ctx, rp)
			if err != nil {
				t.Fatal(err)
			}
			rc, err := cfgs.On(rp, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range rc.Configs {
				if c.Key == "retention.ms" && (c.Value == nil || *c.Value != "-1") {
					t.Errorf("%s: retention.ms %v, want -1", rp, c.MaybeValue())
				}
			}
			// Every record read and committed is deleted, in time.
			await.Until(t, 30*time.Second, "the committed repartition records deleted", func() bool {
				starts, err := k.adm.ListStartOffsets(ctx, rp)
				if err != nil {
					return false
				}
				ends, err := k.adm.ListEndOffsets(ctx, rp)
				if err != nil {
					return false
				}
				purged := true
				ends.Each(func(e kadm.ListedOffset) {
					s, _ := starts.Lookup(rp, e.Partition)
					// Under exactly-once the commit marker after the last
					// record stays: it is never consumed.
					if e.Offset > 0 && s.Offset < e.Offset-1 {
						purged = false
					}
				})
				return purged
			})
			if err := a.stop(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
