package assign

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
)

// The assignor past one machine (issue 47): synthetic groups of P
// partitions and N instances, cold (no instance has run anything) and
// sticky (a group that ran one generation, after one instance joined or
// left), with 0 or 1 standby. The benchmarks report, besides time and
// allocations, what a rebalance carries: the member metadata every member
// sends (JoinGroup hands all of it to the leader) and the assignment the
// leader sends each member (SyncGroup); the coordinator keeps both, for
// every member, in one record of __consumer_offsets, which must fit the
// topic's max.message.bytes (1,048,588 by default). Every assignment holds
// the whole owner map and member table, so that record grows as N² + N·T:
// about 2 MB at 1000 partitions (2000 tasks) and 100 instances.
//
//	taskset -c 0 go test -run '^$' -bench Scale -benchtime 20x ./engine/internal/assign/

// The application: sub-topology 0 reads two co-partitioned topics and
// repartitions into the topic sub-topology 1 reads, so P partitions make
// 2P tasks and every member consumes three topics.
const scaleRepartition = "shop-v1-spent-by-customer-repartition"

func scaleGroups() []Group {
	return []Group{
		{Sub: 0, Topics: []string{"orders", "payments"}},
		{Sub: 1, Topics: []string{scaleRepartition}},
	}
}

func scaleTopics() []string {
	return []string{"orders", "payments", scaleRepartition}
}

func scalePartitions(p int32) map[string]int32 {
	return map[string]int32{"orders": p, "payments": p, scaleRepartition: p}
}

// scaleWarmups are the engine's defaults (Config.MaxWarmupReplicas,
// AcceptableRecoveryLag).
var scaleWarmups = Warmups{Max: 2, AcceptableLag: 10_000}

// scaleMember is instance i with identifiers as long as real ones: the
// engine's InstanceID (12 hex digits), a static member's id as the
// coordinator makes it (the instance id, a dash and a UUID), an advertised
// address.
func scaleMember(i int) Member {
	inst := fmt.Sprintf("%012x", 0x5eed0000+i*7919)
	return Member{
		ID: fmt.Sprintf("%s-%08x-%04x-4%03x-8%03x-%012x", inst, i*2654435761%(1<<32), i%(1<<16), i%4096, (i*7)%4096, i*104729),
		Info: MemberInfo{
			InstanceID: inst,
			Addr:       fmt.Sprintf("http://10.0.%d.%d:8080", i/250, i%250+1),
		},
	}
}

// scaleSum is the offset sum of a caught-up copy of a task's state.
func scaleSum(t topo.TaskID) int64 { return 1_000_000_000*int64(t.Sub+1) + 1_000*int64(t.Partition) }

// settle runs one cold generation of members and returns them as they join
// the next: with the tasks they ran, and offset sums for the state they
// hold (a standby 100 records behind its active).
func settle(tb testing.TB, members []Member, tasks []topo.TaskID, standbys int) []Member {
	tb.Helper()
	plan, err := Assign(members, tasks, standbys)
	if err != nil {
		tb.Fatal(err)
	}
	out := slices.Clone(members)
	for i := range out {
		active, standby := plan.Of(out[i].ID)
		sums := make(map[topo.TaskID]int64, len(active)+len(standby))
		for _, t := range active {
			sums[t] = scaleSum(t)
		}
		for _, t := range standby {
			sums[t] = scaleSum(t) - 100
		}
		out[i].Info.Active, out[i].Info.Standby, out[i].Info.OffsetSums = active, standby, sums
	}
	return out
}

type scaleCase struct {
	parts    int32
	members  int
	standbys int
	scenario string // cold, join (the last of N joined N-1), leave (one of N+1 left)
}

func (c scaleCase) String() string {
	return fmt.Sprintf("P=%d/N=%d/standbys=%d/%s", c.parts, c.members, c.standbys, c.scenario)
}

func scaleCases() []scaleCase {
	var cs []scaleCase
	for _, p := range []int32{96, 1000} {
		for _, n := range []int{6, 100} {
			for _, s := range []int{0, 1} {
				for _, sc := range []string{"cold", "join", "leave"} {
					cs = append(cs, scaleCase{p, n, s, sc})
				}
			}
		}
	}
	return cs
}

// scaleInputs caches each case's members: a benchmark function runs more
// than once, and a sticky case's setup runs the assignor itself.
var scaleInputs sync.Map // scaleCase → []Member

// input returns the members that join and the tasks of c.
func (c scaleCase) input(tb testing.TB) ([]Member, []topo.TaskID) {
	tb.Helper()
	tasks, err := Tasks(scaleGroups(), scalePartitions(c.parts))
	if err != nil {
		tb.Fatal(err)
	}
	if ms, ok := scaleInputs.Load(c); ok {
		return ms.([]Member), tasks
	}
	var members []Member
	switch c.scenario {
	case "cold":
		for i := range c.members {
			members = append(members, scaleMember(i))
		}
	case "join":
		for i := range c.members - 1 {
			members = append(members, scaleMember(i))
		}
		members = append(settle(tb, members, tasks, c.standbys), scaleMember(c.members-1))
	case "leave":
		for i := range c.members + 1 {
			members = append(members, scaleMember(i))
		}
		members = settle(tb, members, tasks, c.standbys)
		members = slices.Delete(members, c.members/2, c.members/2+1)
	default:
		tb.Fatalf("unknown scenario %q", c.scenario)
	}
	scaleInputs.Store(c, members)
	return members, tasks
}

// wireOf is what the leader encodes for every member from plan, as
// Balance builds it.
func wireOf(members []Member, tasks []topo.TaskID, plan Plan) wireAssignment {
	ms := slices.Clone(members)
	slices.SortFunc(ms, func(x, y Member) int {
		if c := strings.Compare(x.Info.InstanceID, y.Info.InstanceID); c != 0 {
			return c
		}
		return strings.Compare(x.ID, y.ID)
	})
	w := wireAssignment{members: make([]Instance, len(ms)), tasks: tasks, active: map[topo.TaskID]int{}, standby: map[topo.TaskID][]int{}}
	index := map[string]int{}
	for i, m := range ms {
		w.members[i] = Instance{MemberID: m.ID, InstanceID: m.Info.InstanceID, Addr: m.Info.Addr, Tags: m.Info.Tags}
		index[m.ID] = i
	}
	for _, t := range tasks {
		w.active[t] = index[plan.Active[t]]
		for _, s := range plan.Standby[t] {
			w.standby[t] = append(w.standby[t], index[s])
		}
	}
	return w
}

// reportUserData reports the sizes of the UserData the package encodes:
// each member's metadata, and the assignment of each member.
func reportUserData(b *testing.B, members []Member, tasks []topo.TaskID, plan Plan) {
	sub, maxSub := 0, 0
	for _, m := range members {
		n := len(encodeMember(m.Info))
		sub += n
		maxSub = max(maxSub, n)
	}
	w := wireOf(members, tasks, plan)
	asg := 0
	for i := range w.members {
		w.self = i
		asg += len(encodeAssignment(w))
	}
	b.ReportMetric(float64(sub)/float64(len(members)), "sub-B/member")
	b.ReportMetric(float64(maxSub), "sub-B/max")
	b.ReportMetric(float64(asg)/float64(len(members)), "asg-B/member")
	b.ReportMetric(float64(asg), "asg-B/total")
}

// BenchmarkAssignScale times the leader's plan (AssignWarm, with the
// engine's default warm-ups) and reports the encoded UserData sizes.
func BenchmarkAssignScale(b *testing.B) {
	for _, c := range scaleCases() {
		b.Run(c.String(), func(b *testing.B) {
			members, tasks := c.input(b)
			b.ReportAllocs()
			var plan Plan
			for b.Loop() {
				var err error
				plan, err = AssignWarm(members, tasks, c.standbys, scaleWarmups)
				if err != nil {
					b.Fatal(err)
				}
			}
			reportUserData(b, members, tasks, plan)
		})
	}
}

// joinMembers is the JoinGroup response the leader gets: every member's
// consumer-protocol metadata (topics, owned partitions, UserData) as its
// Balancer writes it.
func joinMembers(members []Member) []kmsg.JoinGroupResponseMember {
	out := make([]kmsg.JoinGroupResponseMember, len(members))
	for i, m := range members {
		info := m.Info
		mb := New(Config{Groups: scaleGroups(), Metadata: func() MemberInfo { return info }})
		owned := map[string][]int32{}
		for _, t := range info.Active {
			topics := []string{"orders", "payments"}
			if t.Sub == 1 {
				topics = []string{scaleRepartition}
			}
			for _, topic := range topics {
				owned[topic] = append(owned[topic], t.Partition)
			}
		}
		jm := kmsg.NewJoinGroupResponseMember()
		jm.MemberID = m.ID
		inst := m.Info.InstanceID
		jm.InstanceID = &inst
		jm.ProtocolMetadata = mb.JoinGroupMetadata(scaleTopics(), owned, 1)
		out[i] = jm
	}
	return out
}

// groupRecordMember approximates what the coordinator keeps of one member
// of a classic group in the group's metadata record (GroupMetadataValue's
// MemberMetadata: member id, instance id, client id "kgo", client host,
// two timeouts, subscription, assignment, with their length prefixes).
func groupRecordMember(memberID, instanceID string, subscription, assignment int) int {
	const clientID, clientHost = len("kgo"), len("/10.0.0.1")
	return 2 + len(memberID) + 2 + len(instanceID) + 2 + clientID + 2 + clientHost + 4 + 4 + 4 + subscription + 4 + assignment
}

// BenchmarkBalanceScale times the leader's whole turn: decoding every
// member's metadata, the plan, and encoding every member's assignment
// (Balancer.MemberBalancer and Balance), and reports the sizes of the
// group protocol's messages.
func BenchmarkBalanceScale(b *testing.B) {
	for _, c := range scaleCases() {
		b.Run(c.String(), func(b *testing.B) {
			members, _ := c.input(b)
			joined := joinMembers(members)
			partitions := scalePartitions(c.parts)
			leader := New(Config{Groups: scaleGroups(), Standbys: c.standbys, Warmups: scaleWarmups})
			b.ReportAllocs()
			var out []kmsg.SyncGroupRequestGroupAssignment
			for b.Loop() {
				gmb, _, err := leader.MemberBalancer(joined)
				if err != nil {
					b.Fatal(err)
				}
				into, err := gmb.(kgo.GroupMemberBalancerOrError).BalanceOrError(partitions)
				if err != nil {
					b.Fatal(err)
				}
				out = into.IntoSyncAssignment()
			}
			subOf := map[string]int{}
			join := 0
			for _, jm := range joined {
				subOf[jm.MemberID] = len(jm.ProtocolMetadata)
				join += len(jm.MemberID) + len(*jm.InstanceID) + len(jm.ProtocolMetadata)
			}
			instOf := map[string]string{}
			for _, m := range members {
				instOf[m.ID] = m.Info.InstanceID
			}
			sync, record := 0, 0
			for _, sa := range out {
				sync += len(sa.MemberAssignment)
				record += groupRecordMember(sa.MemberID, instOf[sa.MemberID], subOf[sa.MemberID], len(sa.MemberAssignment))
			}
			b.ReportMetric(float64(join)/float64(len(joined)), "join-B/member")
			b.ReportMetric(float64(join), "join-B/leader")
			b.ReportMetric(float64(sync)/float64(len(out)), "sync-B/member")
			b.ReportMetric(float64(sync), "sync-B/total")
			b.ReportMetric(float64(record), "groupmeta-B")
		})
	}
}

// TestAssignAtScale checks the plans of a large group (1000 partitions of
// three topics in two sub-topologies, 2000 tasks; 100 instances; one
// standby) cold and after an instance joined or left: every task active on
// exactly one member, active counts ⌊T/M⌋ or ⌈T/M⌉ and standby counts
// within one of each other (Assign's rule), one standby per task on
// another instance, stickiness; under warm-ups, that a task stays behind
// (or, its owner gone, goes to a caught-up member) only for a planned owner
// that is not caught up. Every member decodes the same
// owner map from the assignment the leader encodes.
func TestAssignAtScale(t *testing.T) {
	const standbys = 1
	for _, scenario := range []string{"cold", "join", "leave"} {
		t.Run(scenario, func(t *testing.T) {
			c := scaleCase{parts: 1000, members: 100, standbys: standbys, scenario: scenario}
			members, tasks := c.input(t)
			if len(tasks) != 2000 || len(members) != 100 {
				t.Fatalf("%d tasks and %d members, want 2000 and 100", len(tasks), len(members))
			}
			plan, err := Assign(members, tasks, standbys)
			if err != nil {
				t.Fatal(err)
			}
			checkScalePlan(t, plan, members, tasks, standbys)

			switch scenario {
			case "join", "leave":
				// A member that stayed keeps its tasks up to its share;
				// after a leave nothing moves but the leaver's tasks.
				prev := Plan{Active: map[topo.TaskID]string{}}
				for _, m := range members {
					for _, task := range m.Info.Active {
						prev.Active[task] = m.ID
					}
				}
				checkSticky(t, prev, plan, members, len(tasks))
				moved := 0
				for _, task := range tasks {
					if owner, ok := prev.Active[task]; ok && owner != plan.Active[task] {
						moved++
					}
				}
				if want := 0; scenario == "leave" && moved != want {
					t.Errorf("%d tasks of members that stayed moved, want %d", moved, want)
				}
				if scenario == "join" {
					newcomer := members[len(members)-1].ID
					got, _ := plan.Of(newcomer)
					if len(got) != len(tasks)/len(members) || moved != len(got) {
						t.Errorf("the newcomer got %d tasks, %d moved; want %d and as many", len(got), moved, len(tasks)/len(members))
					}
				}
			}

			warm, err := AssignWarm(members, tasks, standbys, scaleWarmups)
			if err != nil {
				t.Fatal(err)
			}
			checkWarmPlan(t, warm, plan, members, tasks, standbys)
			checkDecoded(t, warm, members, tasks)
		})
	}
}

// checkScalePlan checks what Assign promises of a plan without tags,
// counting from the plan's maps (not from Plan.Of).
func checkScalePlan(t *testing.T, p Plan, members []Member, tasks []topo.TaskID, standbys int) {
	t.Helper()
	instance := map[string]string{}
	for _, m := range members {
		instance[m.ID] = m.Info.InstanceID
	}
	active := map[string]int{}
	standby := map[string]int{}
	for _, task := range tasks {
		owner, ok := p.Active[task]
		if _, known := instance[owner]; !ok || !known {
			t.Fatalf("task %s has no active member (%q)", task, owner)
		}
		active[owner]++
		reps := p.Standby[task]
		if len(reps) != standbys {
			t.Errorf("task %s has %d standbys, want %d", task, len(reps), standbys)
		}
		on := map[string]bool{instance[owner]: true}
		for _, r := range reps {
			inst, known := instance[r]
			if !known || on[inst] {
				t.Errorf("task %s: standby on %q (instance %q), which is unknown or holds the task already", task, r, inst)
			}
			on[inst] = true
			standby[r]++
		}
	}
	if len(p.Active) != len(tasks) {
		t.Errorf("%d tasks placed, want %d", len(p.Active), len(tasks))
	}
	lo, hi := len(tasks)/len(members), (len(tasks)+len(members)-1)/len(members)
	slo, shi := len(tasks), 0
	for _, m := range members {
		if n := active[m.ID]; n < lo || n > hi {
			t.Errorf("member %s has %d active tasks, want %d to %d", m.ID, n, lo, hi)
		}
		slo, shi = min(slo, standby[m.ID]), max(shi, standby[m.ID])
	}
	if standbys > 0 && shi-slo > 1 {
		t.Errorf("standby counts range from %d to %d", slo, shi)
	}
}

// checkWarmPlan checks the plan under warm-ups against the balanced one:
// every task active exactly once, a task placed elsewhere only because it
// stayed with its previous owner, or went to a caught-up member when its
// owner left, while its planned one lags by more than the acceptable lag, at
// most Max warm-ups, each also a standby.
func checkWarmPlan(t *testing.T, warm, plan Plan, members []Member, tasks []topo.TaskID, standbys int) {
	t.Helper()
	prev := map[topo.TaskID]Member{}
	byID := map[string]Member{}
	for _, m := range members {
		byID[m.ID] = m
		for _, task := range m.Info.Active {
			prev[task] = m
		}
	}
	if len(warm.Active) != len(tasks) {
		t.Errorf("warm plan places %d tasks, want %d", len(warm.Active), len(tasks))
	}
	held := 0
	for _, task := range tasks {
		got, want := warm.Active[task], plan.Active[task]
		if got == want {
			continue
		}
		held++
		was, ok := prev[task]
		if !ok {
			// Its owner left: it went to a member caught up with the
			// most caught-up state reported.
			var best int64
			for _, m := range members {
				best = max(best, m.Info.OffsetSums[task])
			}
			if s, has := byID[got].Info.OffsetSums[task]; has && best-s <= scaleWarmups.AcceptableLag {
				was, ok = byID[got], true
			}
		}
		lag := was.Info.OffsetSums[task] - byID[want].Info.OffsetSums[task]
		if !ok || got != was.ID || lag <= scaleWarmups.AcceptableLag {
			t.Errorf("task %s is on %s, planned on %s (previous or caught-up owner %q, lag %d)", task, got, want, was.ID, lag)
		}
		if slices.Contains(warm.Standby[task], got) {
			t.Errorf("task %s: its active %s is also its standby", task, got)
		}
	}
	if len(warm.Warmup) > scaleWarmups.Max {
		t.Errorf("%d warm-up replicas, want at most %d", len(warm.Warmup), scaleWarmups.Max)
	}
	for task, m := range warm.Warmup {
		if !slices.Contains(warm.Standby[task], m) || warm.Active[task] == m {
			t.Errorf("warm-up of %s on %s is not one of its standbys, or is its active", task, m)
		}
	}
	for _, task := range tasks {
		if len(warm.Standby[task]) > standbys+1 {
			t.Errorf("task %s has %d replicas", task, len(warm.Standby[task]))
		}
	}
	t.Logf("%d of %d tasks held back for warm-ups, %d warm-up replicas", held, len(tasks), len(warm.Warmup))
}

// checkDecoded encodes every member's assignment as the leader does and
// checks that each decodes to the plan, and that each task is active in
// exactly one member's own list.
func checkDecoded(t *testing.T, p Plan, members []Member, tasks []topo.TaskID) {
	t.Helper()
	w := wireOf(members, tasks, p)
	count := map[topo.TaskID]int{}
	for i := range w.members {
		w.self = i
		a, err := decodeAssignment(encodeAssignment(w))
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range a.Active {
			count[task]++
		}
		if i > 0 {
			continue
		}
		for _, task := range tasks {
			pl, ok := a.Tasks[task]
			if !ok || pl.Active.MemberID != p.Active[task] {
				t.Errorf("task %s decodes to %+v, planned on %s", task, pl.Active, p.Active[task])
			}
		}
		if !maps.Equal(a.Partitions, map[int]int32{0: 1000, 1: 1000}) {
			t.Errorf("decoded partitions %v", a.Partitions)
		}
	}
	for _, task := range tasks {
		if count[task] != 1 {
			t.Errorf("task %s is active in %d members' assignments, want 1", task, count[task])
		}
	}
}
