package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
)

// topicPlan is what the runtime knows of the topology's topics: real names,
// partition counts, and how many tasks each sub-topology has.
type topicPlan struct {
	prefix     string
	partitions map[string]int32 // real topic name -> partitions
	tasks      map[int]int32    // sub-topology id -> number of tasks
	storeSub   map[string]*topo.SubTopology
}

func (p *topicPlan) name(r topo.TopicRef) string {
	if r.Internal {
		return p.prefix + "-" + r.Name
	}
	return r.Name
}

// planTopics checks the user topics the topology reads and writes, works out
// the partition count of every internal topic and creates the missing ones.
// Every problem is reported, joined, with what to do about it.
func planTopics(ctx context.Context, cl *kgo.Client, adm *kadm.Client, t *topo.Topology, prefix string) (*topicPlan, error) {
	p := &topicPlan{prefix: prefix, partitions: map[string]int32{}, tasks: map[int]int32{}, storeSub: map[string]*topo.SubTopology{}}

	// User topics must exist: Oxbow creates only its own topics.
	var user []string
	writer := map[string]*topo.SubTopology{} // internal topic -> the sub-topology writing it
	for _, sub := range t.Subs {
		for _, n := range sub.Nodes {
			if n.Kind == topo.ProcessorNode {
				continue
			}
			if n.Internal {
				if n.Kind == topo.SinkNode {
					writer[p.name(n.Ref())] = sub
				}
				continue
			}
			if !slices.Contains(user, n.Topic) {
				user = append(user, n.Topic)
			}
		}
		for _, s := range sub.Stores {
			p.storeSub[s.Name] = sub
		}
	}
	sort.Strings(user)
	var errs []error
	if len(user) > 0 {
		details, err := listTopicsSettled(ctx, adm, user)
		if err != nil {
			return nil, fmt.Errorf("engine: list topics %s: %w", strings.Join(user, ", "), err)
		}
		var missing []string
		for _, name := range user {
			d, ok := details[name]
			if !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
				missing = append(missing, name)
				continue
			}
			if d.Err != nil {
				errs = append(errs, fmt.Errorf("engine: topic %s: %w", name, d.Err))
				continue
			}
			p.partitions[name] = int32(len(d.Partitions))
		}
		if len(missing) > 0 {
			errs = append(errs, fmt.Errorf("engine: the topology uses topics that do not exist: %s; create them (Oxbow creates only its internal topics)", strings.Join(missing, ", ")))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}

	// Internal topics: a repartition topic has the partitions given with
	// engine.Partitions, else as many as the sub-topology writing it has tasks.
	// A sub-topology has as many tasks as its largest input. Iterate to a
	// fixed point, since repartition topics chain.
	fixed := map[string]int32{}
	likeReader := map[string]*topo.SubTopology{} // topic -> the sub-topology reading it
	for _, it := range t.InternalTopics {
		ref := topo.TopicRef{Name: it.Name, Internal: true}
		if it.Kind == topo.RepartitionTopic && it.Partitions > 0 {
			fixed[p.name(ref)] = int32(it.Partitions)
		}
		if it.LikeReader {
			likeReader[p.name(ref)] = t.SubFor(ref)
		}
	}
	for range len(t.Subs) + 1 {
		changed := false
		for _, sub := range t.Subs {
			var n int32
			for ref := range sub.Sources {
				name := p.name(ref)
				if likeReader[name] != nil {
					continue // it takes this sub-topology's count
				}
				c, ok := p.partitions[name]
				if !ok {
					c, ok = fixed[name]
				}
				if !ok {
					if w := writer[name]; w != nil {
						c = p.tasks[w.ID]
					}
				}
				n = max(n, c)
			}
			if n != p.tasks[sub.ID] {
				p.tasks[sub.ID], changed = n, true
			}
		}
		for name, w := range writer {
			if c, ok := fixed[name]; ok {
				p.partitions[name] = c
			} else if r := likeReader[name]; r != nil {
				if p.tasks[r.ID] > 0 {
					p.partitions[name] = p.tasks[r.ID]
				}
			} else if p.tasks[w.ID] > 0 {
				p.partitions[name] = p.tasks[w.ID]
			}
		}
		if !changed {
			break
		}
	}

	// A task owns the same partition of every input, and its state is keyed
	// by partition, so the inputs of a stateful sub-topology must agree.
	for _, sub := range t.Subs {
		if sub.Global || len(sub.Stores) == 0 {
			continue
		}
		var parts []string
		counts := map[int32]bool{}
		for _, ref := range sub.SourceTopics() {
			c := p.partitions[p.name(ref)]
			counts[c] = true
			parts = append(parts, fmt.Sprintf("%s (%d)", p.name(ref), c))
		}
		if len(counts) > 1 {
			errs = append(errs, fmt.Errorf("engine: sub-topology %d keeps state by partition but its input topics differ in partition count: %s; repartition one of them (Stream.Repartition with engine.Partitions) or give them the same count", sub.ID, strings.Join(parts, ", ")))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}

	// Create what is missing; check what exists.
	type want struct {
		partitions  int32
		configs     map[string]*string
		repartition bool
	}
	wanted := map[string]want{}
	compact := "compact"
	for _, it := range t.InternalTopics {
		name := p.name(topo.TopicRef{Name: it.Name, Internal: true})
		switch it.Kind {
		case topo.RepartitionTopic:
			wanted[name] = want{partitions: p.partitions[name], configs: repartitionConfigs(), repartition: true}
		case topo.ChangelogTopicKind:
			store := strings.TrimSuffix(it.Name, "-changelog")
			sub := p.storeSub[store]
			if sub == nil {
				continue
			}
			wanted[name] = want{partitions: p.tasks[sub.ID], configs: map[string]*string{"cleanup.policy": &compact}}
			p.partitions[name] = p.tasks[sub.ID]
		}
	}
	if len(wanted) == 0 {
		return p, nil
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range wanted {
			if !yield(n) {
				return
			}
		}
	})
	var created []string // repartition topics created
	existing, err := adm.ListTopics(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("engine: list internal topics %s: %w", strings.Join(names, ", "), err)
	}
	for _, name := range names {
		w := wanted[name]
		if w.partitions <= 0 {
			errs = append(errs, fmt.Errorf("engine: internal topic %s: cannot tell how many partitions it needs", name))
			continue
		}
		if d, ok := existing[name]; ok && d.Err == nil {
			if got := int32(len(d.Partitions)); got != w.partitions {
				errs = append(errs, fmt.Errorf("engine: internal topic %s has %d partitions, the topology needs %d; reset the application (delete its internal topics) or keep the input partition counts", name, got, w.partitions))
			}
			continue
		}
		resp, err := adm.CreateTopic(ctx, w.partitions, -1, w.configs, name)
		if err == nil {
			err = resp.Err
		}
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			errs = append(errs, fmt.Errorf("engine: create internal topic %s: %w", name, err))
		}
		if w.repartition { // a source of the group
			created = append(created, name)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	// Join the group only once new repartition topics are in the cluster's
	// metadata: the group leader assigns the partitions it finds there, and
	// a topic created a moment ago may not be yet. (Changelogs are not
	// waited for: nothing needs them before the first commit, and a
	// compacted topic can take seconds to appear.)
	if len(created) > 0 {
		if err := awaitTopics(ctx, cl, created, 30*time.Second); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// awaitTopics asks the cluster for the topics' metadata, past the client's
// metadata cache (which kadm reads, and which may be seconds old), until
// every one has partitions, for up to d.
func awaitTopics(ctx context.Context, cl *kgo.Client, topics []string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		req := kmsg.NewPtrMetadataRequest()
		for _, t := range topics {
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr(t)
			req.Topics = append(req.Topics, rt)
		}
		resp, err := req.RequestWith(ctx, cl)
		var missing []string
		if err == nil {
			found := map[string]bool{}
			for _, t := range resp.Topics {
				if t.Topic != nil && t.ErrorCode == 0 && len(t.Partitions) > 0 {
					found[*t.Topic] = true
				}
			}
			for _, t := range topics {
				if !found[t] {
					missing = append(missing, t)
				}
			}
			if len(missing) == 0 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("engine: metadata of the internal topics just created: %w", err)
			}
			return fmt.Errorf("engine: internal topics %v, just created, are not in the cluster metadata after %v", missing, d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// listTopicsSettled lists topics, asking again for a few seconds about
// those the broker does not know: metadata of a topic created a moment ago
// reaches every broker only eventually.
func listTopicsSettled(ctx context.Context, adm *kadm.Client, topics []string) (kadm.TopicDetails, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		details, err := adm.ListTopics(ctx, topics...)
		if err != nil {
			return nil, err
		}
		complete := true
		for _, name := range topics {
			if d, ok := details[name]; !ok || d.Err != nil || len(d.Partitions) == 0 {
				complete = false
			}
		}
		if complete || time.Now().After(deadline) {
			return details, nil
		}
		select {
		case <-ctx.Done():
			return details, nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}
