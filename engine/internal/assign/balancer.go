package assign

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
)

// Protocol is the balancer's group protocol name: cooperative (see
// [Balancer]). An incompatible change of the encodings gets a new name, so
// that during a rolling upgrade members can offer both balancers and Kafka
// picks the one every member speaks.
const Protocol = "oxbow-v2"

// WarmProtocol is the name of the balancer with warm-up replicas (see
// [Warmups]): cooperative as [Protocol], and a member that keeps a standby
// asks for a rebalance when that standby has caught up (see
// [Assignment].Warmups). Members offer it first, so a group whose members
// all speak it uses it; a group with members of an older build agrees on
// [Protocol], where no task waits for a warm-up, since those members would
// never ask for the rebalance that moves it.
const WarmProtocol = "oxbow-v3"

// EagerProtocol is the name of the same balancer run eagerly, as Oxbow's
// instances before cooperative rebalancing ran it (same encodings). Members
// offer both (see [Balancer.Eager]), so that a group of old and new
// instances agrees on this one until every instance speaks [Protocol].
const EagerProtocol = "oxbow-v1"

// Config configures a [Balancer].
type Config struct {
	// Groups are the task-generating sub-topologies (see [GroupsOf]). Every
	// member of one group must be configured with the same Groups: the
	// leader's define the tasks.
	Groups []Group
	// Standbys is the number of standby replicas of each task, placed on
	// members other than the active one; fewer if the group has too few
	// members. Default 0.
	Standbys int
	// Metadata is called at every join for what this member tells the
	// leader. Its InstanceID, Addr and Tags are the instance's own (Tags are
	// its client tags, which make standbys rack aware; see [Assign]); its
	// Active and Standby are usually Current().Active and .Standby; its
	// OffsetSums come from the local state. Default: an empty MemberInfo,
	// which gives up stickiness.
	Metadata func() MemberInfo
	// Warmups are the warm-up replicas of [WarmProtocol] (see
	// [AssignWarm]). Default: none.
	Warmups Warmups
}

// Instance names a group member in an [Assignment].
type Instance struct {
	MemberID   string // the Kafka group member id in this generation
	InstanceID string
	Addr       string            // advertised HTTP address; may be empty
	Tags       map[string]string // client tags (see [MemberInfo]); may be nil
}

// Placement says where a task runs.
type Placement struct {
	Active   Instance
	Standbys []Instance
}

// Assignment is what every member learns at the end of a rebalance: its own
// tasks and where every task of the group runs. It must not be modified.
type Assignment struct {
	Generation int32    // -1 before the first assignment
	Self       Instance // this member
	Active     []topo.TaskID
	Standby    []topo.TaskID
	Members    []Instance // every member of the generation
	Tasks      map[topo.TaskID]Placement
	// Partitions is the number of tasks, that is the partition count of the
	// source topics, of each sub-topology.
	Partitions map[int]int32
	// Warmups says the group runs [WarmProtocol] with warm-ups: a standby
	// task may be a warm-up replica, and when one that was behind has
	// caught up, the member should ask for a rebalance (a probing one) so
	// that the task moves to it.
	Warmups bool
	// FollowUp: the plan gives this member tasks that another member still
	// owns, so they were left out of its partitions (see [Balancer]); a
	// second rebalance follows once that member has revoked them. The
	// member may join it at once (kgo.Client.ForceRebalance) rather than
	// notice it by a heartbeat, which franz-go sends half a second after a
	// cooperative rebalance: the members that revoked wait for every
	// member in that rebalance, their staying tasks' commits with them.
	FollowUp bool
}

// KeyOwner returns the task that holds key in sub-topology sub, and where it
// runs. key is the serialized key as the producer partitioned it; the
// producer must have used Kafka's default partitioner (see [Partition]).
func (a Assignment) KeyOwner(sub int, key []byte) (topo.TaskID, Placement, bool) {
	n := a.Partitions[sub]
	if n <= 0 {
		return topo.TaskID{}, Placement{}, false
	}
	t := topo.TaskID{Sub: sub, Partition: Partition(key, n)}
	pl, ok := a.Tasks[t]
	return t, pl, ok
}

// Balancer is a franz-go group balancer that assigns tasks rather than
// partitions (see the package doc). Pass it, then [Balancer.Eager], to
// kgo.Balancers.
//
// The balancer is cooperative (KIP-429's incremental protocol): a rebalance
// revokes only the tasks that move, and every other task goes on running
// through it. A task that moves is not given to its new owner in the
// rebalance that moves it: the plan leaves it out of the new owner's
// partitions while another member still reports it as its own, that member
// revokes it (and commits its work), and, having revoked something, joins
// again at once; in that second rebalance the task belongs to nobody and
// goes to its new owner. So a task is never open on two members, and its
// new owner restores state the old one has committed. The owner map every
// member receives shows the plan (the new owner) from the first rebalance.
//
// Why the classic protocol with a client-side balancer rather than KIP-848's
// consumer protocol (franz-go speaks it, Kafka 4 serves it): there the
// broker assigns partitions with its own assignors, which know nothing of
// tasks, co-partitioned topics, local state or standbys; KIP-1071's streams
// protocol, which does, franz-go does not speak.
type Balancer struct {
	groups   []Group
	standbys int
	metadata func() MemberInfo
	current  *atomic.Pointer[Assignment] // shared with the twins
	eager    bool
	warm     bool // WarmProtocol (with warmups)
	warmups  Warmups
}

var (
	_ kgo.GroupBalancer           = (*Balancer)(nil)
	_ kgo.ConsumerBalancerBalance = (*Balancer)(nil)
)

// New returns a balancer. It panics on a wiring mistake in cfg: a negative
// Standbys, a group without topics, a sub-topology or topic listed twice.
func New(cfg Config) *Balancer {
	var errs []error
	if cfg.Standbys < 0 {
		errs = append(errs, fmt.Errorf("standbys is %d; it cannot be negative", cfg.Standbys))
	}
	if cfg.Warmups.Max < 0 || cfg.Warmups.AcceptableLag < 0 {
		errs = append(errs, fmt.Errorf("warm-ups %+v; neither can be negative", cfg.Warmups))
	}
	subs := map[int]bool{}
	topics := map[string]int{}
	for _, g := range cfg.Groups {
		if subs[g.Sub] {
			errs = append(errs, fmt.Errorf("sub-topology %d is listed twice", g.Sub))
		}
		subs[g.Sub] = true
		if len(g.Topics) == 0 {
			errs = append(errs, fmt.Errorf("sub-topology %d has no topics", g.Sub))
		}
		for _, t := range g.Topics {
			if s, ok := topics[t]; ok {
				errs = append(errs, fmt.Errorf("topic %q is read by sub-topologies %d and %d", t, s, g.Sub))
			}
			topics[t] = g.Sub
		}
	}
	if len(errs) > 0 {
		panic("assign: invalid Config: " + errors.Join(errs...).Error())
	}
	b := &Balancer{standbys: cfg.Standbys, metadata: cfg.Metadata, current: new(atomic.Pointer[Assignment]), warm: true, warmups: cfg.Warmups}
	for _, g := range cfg.Groups {
		b.groups = append(b.groups, Group{Sub: g.Sub, Topics: slices.Sorted(slices.Values(g.Topics))})
	}
	if b.metadata == nil {
		b.metadata = func() MemberInfo { return MemberInfo{} }
	}
	return b
}

// Current returns the latest assignment this member received. It is safe
// for concurrent use.
func (b *Balancer) Current() Assignment {
	if a := b.current.Load(); a != nil {
		return *a
	}
	return Assignment{Generation: -1}
}

// Cooperative returns the same balancer under [Protocol]: cooperative,
// without warm-ups. It shares b's current assignment.
func (b *Balancer) Cooperative() *Balancer {
	c := *b
	c.warm = false
	return &c
}

// Eager returns the same balancer under [EagerProtocol], run eagerly: every
// member gives up all its tasks before each rebalance. It shares b's
// current assignment.
func (b *Balancer) Eager() *Balancer {
	e := *b
	e.eager, e.warm = true, false
	return &e
}

// ProtocolName implements kgo.GroupBalancer.
func (b *Balancer) ProtocolName() string {
	switch {
	case b.eager:
		return EagerProtocol
	case b.warm:
		return WarmProtocol
	}
	return Protocol
}

// IsCooperative implements kgo.GroupBalancer (see [Balancer]).
func (b *Balancer) IsCooperative() bool { return !b.eager }

// JoinGroupMetadata implements kgo.GroupBalancer: the consumer protocol's
// member metadata, with the partitions the member owns (the cooperative
// protocol's OwnedPartitions) and its [MemberInfo] as UserData.
func (b *Balancer) JoinGroupMetadata(interests []string, owned map[string][]int32, generation int32) []byte {
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Version = 3
	meta.Topics = interests
	meta.Generation = generation
	for _, topic := range slices.Sorted(maps.Keys(owned)) {
		op := kmsg.NewConsumerMemberMetadataOwnedPartition()
		op.Topic, op.Partitions = topic, slices.Sorted(slices.Values(owned[topic]))
		meta.OwnedPartitions = append(meta.OwnedPartitions, op)
	}
	meta.UserData = encodeMember(b.metadata())
	return meta.AppendTo(nil)
}

// MemberBalancer implements kgo.GroupBalancer. Besides the members'
// interests it asks for the partition counts of every group topic.
func (b *Balancer) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	cb, err := kgo.NewConsumerBalancer(b, members)
	if err != nil {
		return nil, nil, err
	}
	topics := map[string]struct{}{}
	for t := range cb.MemberTopics() {
		topics[t] = struct{}{}
	}
	for _, g := range b.groups {
		for _, t := range g.Topics {
			topics[t] = struct{}{}
		}
	}
	return cb, topics, nil
}

// Balance implements kgo.ConsumerBalancerBalance; franz-go calls it on the
// group leader. A failure (a member's metadata, missing topics, co-partitioned
// topics with different partition counts) fails the rebalance with the error.
func (b *Balancer) Balance(cb *kgo.ConsumerBalancer, topics map[string]int32) kgo.IntoSyncAssignment {
	var members []Member
	var errs []error
	// Which member owns each task's partitions now (cooperative: the
	// members say in OwnedPartitions).
	subOf := map[string]int{}
	for _, g := range b.groups {
		for _, t := range g.Topics {
			subOf[t] = g.Sub
		}
	}
	ownedBy := map[topo.TaskID]string{}
	cb.EachMember(func(m *kmsg.JoinGroupResponseMember, meta *kmsg.ConsumerMemberMetadata) {
		info, err := decodeMember(meta.UserData)
		if err != nil {
			errs = append(errs, fmt.Errorf("member %s: %w", m.MemberID, err))
		}
		members = append(members, Member{ID: m.MemberID, Info: info})
		for _, op := range meta.OwnedPartitions {
			sub, ok := subOf[op.Topic]
			if !ok {
				continue
			}
			for _, p := range op.Partitions {
				ownedBy[topo.TaskID{Sub: sub, Partition: p}] = m.MemberID
			}
		}
	})
	tasks, err := Tasks(b.groups, topics)
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		cb.SetError(err)
		return nil
	}
	var warm Warmups
	if b.warm {
		warm = b.warmups
	}
	plan, err := AssignWarm(members, tasks, b.standbys, warm)
	if err != nil {
		cb.SetError(err)
		return nil
	}

	slices.SortFunc(members, func(x, y Member) int {
		if c := strings.Compare(x.Info.InstanceID, y.Info.InstanceID); c != 0 {
			return c
		}
		return strings.Compare(x.ID, y.ID)
	})
	w := wireAssignment{
		generation: cb.Info().Generation,
		members:    make([]Instance, len(members)),
		tasks:      tasks,
		active:     map[topo.TaskID]int{},
		standby:    map[topo.TaskID][]int{},
	}
	index := map[string]int{}
	for i, m := range members {
		w.members[i] = Instance{MemberID: m.ID, InstanceID: m.Info.InstanceID, Addr: m.Info.Addr, Tags: m.Info.Tags}
		index[m.ID] = i
	}
	for _, t := range tasks {
		w.active[t] = index[plan.Active[t]]
		for _, s := range plan.Standby[t] {
			w.standby[t] = append(w.standby[t], index[s])
		}
	}
	topicsOf := map[int][]string{}
	for _, g := range b.groups {
		topicsOf[g.Sub] = g.Topics
	}
	var out syncPlan
	for i, m := range members {
		w.self = i
		ka := kmsg.NewConsumerMemberAssignment()
		active, _ := plan.Of(m.ID)
		if !b.eager {
			// A task another member still owns moves in the next
			// rebalance, once that member has revoked it.
			active = slices.DeleteFunc(slices.Clone(active), func(t topo.TaskID) bool {
				owner, owned := ownedBy[t]
				return owned && owner != m.ID
			})
		}
		for _, topic := range b.topicNames() {
			var ps []int32
			for _, t := range active {
				if slices.Contains(topicsOf[t.Sub], topic) {
					ps = append(ps, t.Partition)
				}
			}
			if len(ps) > 0 {
				at := kmsg.NewConsumerMemberAssignmentTopic()
				at.Topic, at.Partitions = topic, ps
				ka.Topics = append(ka.Topics, at)
			}
		}
		ka.UserData = encodeAssignment(w)
		sa := kmsg.NewSyncGroupRequestGroupAssignment()
		sa.MemberID = m.ID
		sa.MemberAssignment = ka.AppendTo(nil)
		out = append(out, sa)
	}
	slices.SortFunc(out, func(x, y kmsg.SyncGroupRequestGroupAssignment) int { return strings.Compare(x.MemberID, y.MemberID) })
	return out
}

// topicNames lists every group topic, sorted.
func (b *Balancer) topicNames() []string {
	var ts []string
	for _, g := range b.groups {
		ts = append(ts, g.Topics...)
	}
	slices.Sort(ts)
	return ts
}

type syncPlan []kmsg.SyncGroupRequestGroupAssignment

func (p syncPlan) IntoSyncAssignment() []kmsg.SyncGroupRequestGroupAssignment { return p }

// ParseSyncAssignment implements kgo.GroupBalancer. It records the whole
// assignment for [Balancer.Current] and returns the partitions of this
// member's active tasks; standby tasks' changelogs are the runtime's to read.
func (b *Balancer) ParseSyncAssignment(assignment []byte) (map[string][]int32, error) {
	var ka kmsg.ConsumerMemberAssignment
	if err := ka.ReadFrom(assignment); err != nil {
		return nil, fmt.Errorf("assign: unreadable member assignment: %w", err)
	}
	a, err := decodeAssignment(ka.UserData)
	if err != nil {
		return nil, err
	}
	a.Warmups = b.warm && b.warmups.Max > 0
	m := make(map[string][]int32, len(ka.Topics))
	for _, t := range ka.Topics {
		m[t.Topic] = append(m[t.Topic], t.Partitions...)
	}
	// A task's partition is in all of its sub-topology's topics or none.
	firstTopic := make(map[int]string, len(b.groups))
	for _, g := range b.groups {
		firstTopic[g.Sub] = g.Topics[0]
	}
	for _, t := range a.Active {
		if !slices.Contains(m[firstTopic[t.Sub]], t.Partition) {
			a.FollowUp = true
			break
		}
	}
	b.current.Store(&a)
	return m, nil
}
