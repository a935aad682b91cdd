package assign

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
)

func tk(sub int, p int32) topo.TaskID { return topo.TaskID{Sub: sub, Partition: p} }

func tasksOf(sub int, n int32) []topo.TaskID {
	var ts []topo.TaskID
	for p := range n {
		ts = append(ts, tk(sub, p))
	}
	return ts
}

// member builds a member whose id is "m-" + its process id.
func member(process string, active ...topo.TaskID) Member {
	return Member{ID: "m-" + process, Info: MemberInfo{InstanceID: process, Active: active}}
}

func withSums(m Member, sums map[topo.TaskID]int64) Member {
	m.Info.OffsetSums = sums
	return m
}

func withStandby(m Member, standby ...topo.TaskID) Member {
	m.Info.Standby = standby
	return m
}

// render shows a plan as "member: active | standby" lines, by member id.
func render(p Plan, members []Member) string {
	ids := make([]string, len(members))
	for i, m := range members {
		ids[i] = m.ID
	}
	slices.Sort(ids)
	var b strings.Builder
	for _, id := range ids {
		active, standby := p.Of(id)
		fmt.Fprintf(&b, "%s: %s | %s\n", id, joinTasks(active), joinTasks(standby))
	}
	return b.String()
}

func joinTasks(ts []topo.TaskID) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = t.String()
	}
	return strings.Join(s, " ")
}

func TestAssign(t *testing.T) {
	oneSub := []Group{{Sub: 0, Topics: []string{"a", "b"}}}
	twoSubs := []Group{{Sub: 0, Topics: []string{"a", "b"}}, {Sub: 1, Topics: []string{"c"}}}
	four := map[string]int32{"a": 4, "b": 4, "c": 4}
	for _, tc := range []struct {
		name       string
		groups     []Group
		partitions map[string]int32
		members    []Member
		standbys   int
		want       string // render's output
		wantErr    string
	}{{
		name:       "fresh group splits evenly",
		groups:     oneSub,
		partitions: four,
		members:    []Member{member("a"), member("b")},
		want: "m-a: 0_0 0_2 | \n" +
			"m-b: 0_1 0_3 | \n",
	}, {
		name:       "a joining member takes only the excess",
		groups:     oneSub,
		partitions: four,
		members:    []Member{member("a", tasksOf(0, 4)...), member("b")},
		want: "m-a: 0_0 0_1 | \n" +
			"m-b: 0_2 0_3 | \n",
	}, {
		name:       "a leaving member's tasks go to the others; the rest stay",
		groups:     oneSub,
		partitions: four,
		// c had 0_2 and left.
		members: []Member{member("a", tk(0, 0), tk(0, 3)), member("b", tk(0, 1))},
		want: "m-a: 0_0 0_3 | \n" +
			"m-b: 0_1 0_2 | \n",
	}, {
		name:       "a restarted process gets its tasks back by its state",
		groups:     oneSub,
		partitions: four,
		members: []Member{
			member("a", tk(0, 0), tk(0, 1)),
			withSums(member("b"), map[topo.TaskID]int64{tk(0, 3): 10, tk(0, 2): 10}),
		},
		want: "m-a: 0_0 0_1 | \n" +
			"m-b: 0_2 0_3 | \n",
	}, {
		name:       "the most caught-up state wins",
		groups:     oneSub,
		partitions: map[string]int32{"a": 2, "b": 2},
		members: []Member{
			member("a"),
			withSums(member("b"), map[topo.TaskID]int64{tk(0, 1): 50}),
			withSums(member("c"), map[topo.TaskID]int64{tk(0, 1): 100}),
		},
		want: "m-a: 0_0 | \n" +
			"m-b:  | \n" +
			"m-c: 0_1 | \n",
	}, {
		name:       "stickiness beats caught-up state",
		groups:     oneSub,
		partitions: map[string]int32{"a": 1, "b": 1},
		members: []Member{
			withSums(member("a", tk(0, 0)), map[topo.TaskID]int64{tk(0, 0): 10}),
			withSums(member("b"), map[topo.TaskID]int64{tk(0, 0): 100}),
		},
		want: "m-a: 0_0 | \n" +
			"m-b:  | \n",
	}, {
		name:       "of two members claiming a task the more caught-up keeps it",
		groups:     oneSub,
		partitions: map[string]int32{"a": 2, "b": 2},
		members: []Member{
			withSums(member("a", tk(0, 0)), map[topo.TaskID]int64{tk(0, 0): 10}),
			withSums(member("b", tk(0, 0)), map[topo.TaskID]int64{tk(0, 0): 20}),
		},
		want: "m-a: 0_1 | \n" +
			"m-b: 0_0 | \n",
	}, {
		name:       "an overloaded sticky member keeps a spread of sub-topologies",
		groups:     twoSubs,
		partitions: four,
		members:    []Member{member("a", append(tasksOf(0, 4), tasksOf(1, 4)...)...), member("b")},
		want: "m-a: 0_0 0_1 1_0 1_1 | \n" +
			"m-b: 0_2 0_3 1_2 1_3 | \n",
	}, {
		name:       "each sub-topology spreads over the members",
		groups:     twoSubs,
		partitions: four,
		members:    []Member{member("a"), member("b"), member("c")},
		want: "m-a: 0_0 0_3 1_2 | \n" +
			"m-b: 0_1 1_0 1_3 | \n" +
			"m-c: 0_2 1_1 | \n",
	}, {
		name:       "more members than tasks leaves some idle",
		groups:     oneSub,
		partitions: map[string]int32{"a": 2, "b": 2},
		members:    []Member{member("a"), member("b"), member("c"), member("d")},
		want: "m-a: 0_0 | \n" +
			"m-b: 0_1 | \n" +
			"m-c:  | \n" +
			"m-d:  | \n",
	}, {
		name:       "standbys go round the ring",
		groups:     oneSub,
		partitions: map[string]int32{"a": 3, "b": 3},
		members:    []Member{member("a"), member("b"), member("c")},
		standbys:   1,
		want: "m-a: 0_0 | 0_2\n" +
			"m-b: 0_1 | 0_0\n" +
			"m-c: 0_2 | 0_1\n",
	}, {
		name:       "a standby goes where the state is",
		groups:     oneSub,
		partitions: map[string]int32{"a": 1, "b": 1},
		members: []Member{
			member("a", tk(0, 0)),
			member("b"),
			withSums(member("c"), map[topo.TaskID]int64{tk(0, 0): 7}),
		},
		standbys: 1,
		want: "m-a: 0_0 | \n" +
			"m-b:  | \n" +
			"m-c:  | 0_0\n",
	}, {
		name:       "a standby stays a standby",
		groups:     oneSub,
		partitions: map[string]int32{"a": 1, "b": 1},
		members: []Member{
			member("a", tk(0, 0)),
			withStandby(member("b"), tk(0, 0)),
			withSums(member("c"), map[topo.TaskID]int64{tk(0, 0): 7}),
		},
		standbys: 1,
		want: "m-a: 0_0 | \n" +
			"m-b:  | 0_0\n" +
			"m-c:  | \n",
	}, {
		name:       "a former standby becomes active when the active leaves",
		groups:     oneSub,
		partitions: map[string]int32{"a": 3, "b": 3},
		// a had 0_0 active and left; d was its standby.
		members: []Member{
			member("b"),
			member("c", tk(0, 1)),
			withSums(withStandby(member("d"), tk(0, 0)), map[topo.TaskID]int64{tk(0, 0): 5}),
		},
		standbys: 1,
		want: "m-b: 0_2 | 0_0\n" +
			"m-c: 0_1 | 0_2\n" +
			"m-d: 0_0 | 0_1\n",
	}, {
		name:       "standbys are capped by the other members",
		groups:     oneSub,
		partitions: map[string]int32{"a": 2, "b": 2},
		members:    []Member{member("a"), member("b")},
		standbys:   3,
		want: "m-a: 0_0 | 0_1\n" +
			"m-b: 0_1 | 0_0\n",
	}, {
		name:       "a lone member has no standbys",
		groups:     oneSub,
		partitions: map[string]int32{"a": 2, "b": 2},
		members:    []Member{member("a")},
		standbys:   1,
		want:       "m-a: 0_0 0_1 | \n",
	}, {
		name:       "co-partitioned topics must agree on the partition count",
		groups:     []Group{{Sub: 3, Topics: []string{"orders", "customers"}}},
		partitions: map[string]int32{"orders": 4, "customers": 3},
		members:    []Member{member("a")},
		wantErr:    "sub-topology 3 reads co-partitioned topics with different partition counts: customers (3), orders (4)",
	}, {
		name:       "a missing topic is named",
		groups:     twoSubs,
		partitions: map[string]int32{"a": 4, "b": 4},
		members:    []Member{member("a")},
		wantErr:    `sub-topology 1 reads topic "c", which has no partitions`,
	}, {
		name:       "no members",
		groups:     oneSub,
		partitions: four,
		wantErr:    "no members",
	}, {
		name:       "negative standbys",
		groups:     oneSub,
		partitions: four,
		members:    []Member{member("a")},
		standbys:   -1,
		wantErr:    "cannot be negative",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			tasks, err := Tasks(tc.groups, tc.partitions)
			var plan Plan
			if err == nil {
				plan, err = Assign(tc.members, tasks, tc.standbys)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := render(plan, tc.members); got != tc.want {
				t.Errorf("plan:\n%s\nwant:\n%s", got, tc.want)
			}
			checkPlan(t, plan, tc.members, tasks, tc.standbys)

			// The same input in another order gives the same plan.
			rng := rand.New(rand.NewPCG(1, 2))
			for range 5 {
				ms, ts := slices.Clone(tc.members), slices.Clone(tasks)
				rng.Shuffle(len(ms), func(i, j int) { ms[i], ms[j] = ms[j], ms[i] })
				rng.Shuffle(len(ts), func(i, j int) { ts[i], ts[j] = ts[j], ts[i] })
				again, err := Assign(ms, ts, tc.standbys)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(again, plan) {
					t.Fatalf("shuffled input gave\n%s\nwant\n%s", render(again, ms), render(plan, ms))
				}
			}
		})
	}
}

func TestTasksCoPartitionError(t *testing.T) {
	_, err := Tasks([]Group{{Sub: 2, Topics: []string{"b", "a"}}}, map[string]int32{"a": 4, "b": 8})
	var cpe *CoPartitionError
	if !errors.As(err, &cpe) {
		t.Fatalf("err = %v, want a *CoPartitionError", err)
	}
	if cpe.Sub != 2 || !slices.Equal(cpe.Topics, []string{"a", "b"}) || !slices.Equal(cpe.Partitions, []int32{4, 8}) {
		t.Errorf("error = %+v", cpe)
	}
	_, err = Tasks([]Group{{Sub: 0, Topics: []string{"x"}}}, nil)
	if !errors.Is(err, ErrUnknownTopic) {
		t.Errorf("err = %v, want ErrUnknownTopic", err)
	}
}

// checkPlan checks what every plan without tags must satisfy.
func checkPlan(t *testing.T, p Plan, members []Member, tasks []topo.TaskID, standbys int) {
	t.Helper()
	checkPlaced(t, p, members, tasks, standbys)
	slo, shi := len(tasks)*standbys, 0
	for _, m := range members {
		_, standby := p.Of(m.ID)
		slo, shi = min(slo, len(standby)), max(shi, len(standby))
	}
	if shi-slo > 1 {
		t.Errorf("standby task counts range from %d to %d", slo, shi)
	}
}

// checkPlaced checks what every plan must satisfy, with tags or without:
// standby counts may then differ more, for distinctness.
func checkPlaced(t *testing.T, p Plan, members []Member, tasks []topo.TaskID, standbys int) {
	t.Helper()
	ids := map[string]bool{}
	for _, m := range members {
		ids[m.ID] = true
	}
	if len(p.Active) != len(tasks) {
		t.Errorf("%d tasks placed, want %d", len(p.Active), len(tasks))
	}
	wantReplicas := min(standbys, len(members)-1)
	for _, task := range tasks {
		owner, ok := p.Active[task]
		if !ok || !ids[owner] {
			t.Errorf("task %s has active %q", task, owner)
		}
		reps := p.Standby[task]
		if len(reps) != wantReplicas {
			t.Errorf("task %s has %d standbys, want %d", task, len(reps), wantReplicas)
		}
		seen := map[string]bool{owner: true}
		for _, r := range reps {
			if seen[r] || !ids[r] {
				t.Errorf("task %s: standby %q is its active, another standby, or unknown", task, r)
			}
			seen[r] = true
		}
	}
	lo, hi := len(tasks), 0
	for id := range ids {
		active, _ := p.Of(id)
		lo, hi = min(lo, len(active)), max(hi, len(active))
	}
	if hi-lo > 1 {
		t.Errorf("active task counts range from %d to %d", lo, hi)
	}
}

// TestAssignRandom checks the invariants, balance and stickiness on random
// groups evolving over generations.
func TestAssignRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for round := range 200 {
		subs := 1 + rng.IntN(3)
		var tasks []topo.TaskID
		for s := range subs {
			tasks = append(tasks, tasksOf(s, int32(1+rng.IntN(12)))...)
		}
		standbys := rng.IntN(3)
		var members []Member
		for i := range 1 + rng.IntN(6) {
			members = append(members, member(fmt.Sprintf("p%02d", i)))
		}
		next := len(members)
		var prev Plan
		for gen := range 6 {
			plan, err := Assign(members, tasks, standbys)
			if err != nil {
				t.Fatal(err)
			}
			checkPlan(t, plan, members, tasks, standbys)
			if gen > 0 {
				checkSticky(t, prev, plan, members, len(tasks))
			}
			if t.Failed() {
				t.Fatalf("round %d generation %d:\n%s", round, gen, render(plan, members))
			}
			prev = plan
			for i := range members {
				members[i].Info.Active, members[i].Info.Standby = plan.Of(members[i].ID)
				// Some state lingers from earlier generations.
				members[i].Info.OffsetSums = map[topo.TaskID]int64{}
				for range rng.IntN(4) {
					members[i].Info.OffsetSums[tasks[rng.IntN(len(tasks))]] = rng.Int64N(100)
				}
			}
			switch {
			case rng.IntN(2) == 0 && len(members) > 1:
				i := rng.IntN(len(members))
				members = slices.Delete(members, i, i+1)
			default:
				members = append(members, member(fmt.Sprintf("p%02d", next)))
				next++
			}
		}
	}
}

// checkSticky checks that a member that stayed keeps its tasks up to its new
// share.
func checkSticky(t *testing.T, prev, plan Plan, members []Member, tasks int) {
	t.Helper()
	lo := tasks / len(members)
	for _, m := range members {
		had, _ := prev.Of(m.ID)
		now, _ := plan.Of(m.ID)
		kept := 0
		for _, task := range had {
			if slices.Contains(now, task) {
				kept++
			}
		}
		if want := min(len(had), lo); kept < want {
			t.Errorf("member %s kept %d of its %d tasks, want at least %d", m.ID, kept, len(had), want)
		}
	}
}

func TestGroupsOf(t *testing.T) {
	g := &topo.Graph{}
	orders := g.AddNode(&topo.Node{Name: "orders", Kind: topo.SourceNode, Op: "stream", Topic: "orders"})
	rekeyed := g.AddNode(&topo.Node{Name: "rekeyed", Kind: topo.SourceNode, Op: "stream", Topic: "by-customer-repartition", Internal: true})
	g.AddNode(&topo.Node{Name: "sink", Kind: topo.SinkNode, Op: "to", Topic: "out", Parents: []*topo.Node{orders, rekeyed}})
	g.AddNode(&topo.Node{Name: "clicks", Kind: topo.SourceNode, Op: "stream", Topic: "clicks"})
	g.AddNode(&topo.Node{Name: "countries", Kind: topo.SourceNode, Op: "global", Topic: "countries", Global: true})
	tp, err := topo.Build(g)
	if err != nil {
		t.Fatal(err)
	}
	got := GroupsOf(tp, func(r topo.TopicRef) string {
		if r.Internal {
			return "app-v1-" + r.Name
		}
		return r.Name
	})
	want := []Group{{Sub: 0, Topics: []string{"app-v1-by-customer-repartition", "orders"}}, {Sub: 1, Topics: []string{"clicks"}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("GroupsOf = %+v, want %+v", got, want)
	}
}

// withTags gives m the tags of key-value pairs kv.
func withTags(m Member, kv ...string) Member {
	m.Info.Tags = map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m.Info.Tags[kv[i]] = kv[i+1]
	}
	return m
}

func TestAssignRackAware(t *testing.T) {
	zc := func(process, zone, cluster string, active ...topo.TaskID) Member {
		return withTags(member(process, active...), "zone", zone, "cluster", cluster)
	}
	for _, tc := range []struct {
		name     string
		members  []Member
		tasks    int32 // of sub-topology 0
		standbys int
		want     string // render's output
	}{{
		// The single member of r2 holds the standby of every task of r1,
		// though that makes the standby counts uneven.
		name: "every standby is in the other rack than its active",
		members: []Member{
			withTags(member("a"), "rack", "r1"),
			withTags(member("b"), "rack", "r1"),
			withTags(member("c"), "rack", "r2"),
		},
		tasks:    6,
		standbys: 1,
		want: "m-a: 0_0 0_3 | 0_2\n" +
			"m-b: 0_1 0_4 | 0_5\n" +
			"m-c: 0_2 0_5 | 0_0 0_1 0_3 0_4\n",
	}, {
		// Each standby differs from its active in both zone and cluster: a
		// and d are each other's only such member; b's are c and e.
		name: "a member that differs in two tags beats one that differs in one",
		members: []Member{
			zc("a", "z1", "k1"),
			zc("b", "z1", "k2"),
			zc("c", "z2", "k1"),
			zc("d", "z2", "k2"),
			zc("e", "z2", "k1"),
		},
		tasks:    5,
		standbys: 1,
		want: "m-a: 0_0 | 0_3\n" +
			"m-b: 0_1 | 0_2 0_4\n" +
			"m-c: 0_2 | 0_1\n" +
			"m-d: 0_3 | 0_0\n" +
			"m-e: 0_4 | \n",
	}, {
		// The first two replicas of a task complete the three racks (d is
		// alone in r3); the third goes to a member of any rack.
		name: "more standbys than racks",
		members: []Member{
			withTags(member("a"), "rack", "r1"),
			withTags(member("b"), "rack", "r1"),
			withTags(member("c"), "rack", "r2"),
			withTags(member("d"), "rack", "r3"),
			withTags(member("e"), "rack", "r2"),
		},
		tasks:    5,
		standbys: 3,
		want: "m-a: 0_0 | 0_2 0_3 0_4\n" +
			"m-b: 0_1 | 0_0 0_3 0_4\n" +
			"m-c: 0_2 | 0_0 0_1\n" +
			"m-d: 0_3 | 0_0 0_1 0_2 0_4\n" +
			"m-e: 0_4 | 0_1 0_2 0_3\n",
	}, {
		// Actives stay. Among the members of the other rack, 0_0's prior
		// standby d keeps it and c's state wins 0_1; the prior standbys in
		// the active's rack (a of 0_1, d of 0_2) lose theirs.
		name: "stickiness and prior standbys hold among equally distinct members",
		members: []Member{
			withTags(withStandby(member("a", tk(0, 0)), tk(0, 1)), "rack", "r1"),
			withTags(withStandby(member("b", tk(0, 1)), tk(0, 3)), "rack", "r1"),
			withTags(withSums(member("c", tk(0, 2)), map[topo.TaskID]int64{tk(0, 1): 5}), "rack", "r2"),
			withTags(withStandby(member("d", tk(0, 3)), tk(0, 0), tk(0, 2)), "rack", "r2"),
		},
		tasks:    4,
		standbys: 1,
		want: "m-a: 0_0 | 0_2\n" +
			"m-b: 0_1 | 0_3\n" +
			"m-c: 0_2 | 0_1\n" +
			"m-d: 0_3 | 0_0\n",
	}, {
		name: "a member without the tag differs from those with it",
		members: []Member{
			withTags(member("a"), "rack", "r1"),
			member("b"),
			withTags(member("c"), "rack", "r1"),
		},
		tasks:    3,
		standbys: 1,
		want: "m-a: 0_0 | \n" +
			"m-b: 0_1 | 0_0 0_2\n" +
			"m-c: 0_2 | 0_1\n",
	}, {
		name: "the same tags everywhere change nothing",
		members: []Member{
			withTags(member("a"), "rack", "r1"),
			withTags(member("b"), "rack", "r1"),
			withTags(member("c"), "rack", "r1"),
		},
		tasks:    3,
		standbys: 1,
		want: "m-a: 0_0 | 0_2\n" +
			"m-b: 0_1 | 0_0\n" +
			"m-c: 0_2 | 0_1\n",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			tasks := tasksOf(0, tc.tasks)
			plan, err := Assign(tc.members, tasks, tc.standbys)
			if err != nil {
				t.Fatal(err)
			}
			if got := render(plan, tc.members); got != tc.want {
				t.Errorf("plan:\n%s\nwant:\n%s", got, tc.want)
			}
			checkPlaced(t, plan, tc.members, tasks, tc.standbys)
			checkDistinct(t, plan, tc.members)
			rng := rand.New(rand.NewPCG(3, 4))
			for range 5 {
				ms := slices.Clone(tc.members)
				rng.Shuffle(len(ms), func(i, j int) { ms[i], ms[j] = ms[j], ms[i] })
				again, err := Assign(ms, tasks, tc.standbys)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(again, plan) {
					t.Fatalf("shuffled input gave\n%s\nwant\n%s", render(again, ms), render(plan, ms))
				}
			}
		})
	}
}

// checkDistinct checks that every task whose active has a member with other
// tags than its own has a standby with other tags.
func checkDistinct(t *testing.T, p Plan, members []Member) {
	t.Helper()
	tags := map[string]map[string]string{}
	for _, m := range members {
		tags[m.ID] = m.Info.Tags
	}
	for task, owner := range p.Active {
		if len(p.Standby[task]) == 0 {
			continue
		}
		possible := slices.ContainsFunc(members, func(m Member) bool {
			return m.ID != owner && len(differing(m.Info.Tags, tags[owner])) > 0
		})
		found := slices.ContainsFunc(p.Standby[task], func(id string) bool {
			return len(differing(tags[id], tags[owner])) > 0
		})
		if possible && !found {
			t.Errorf("task %s: every standby %v has the tags %v of the active %s", task, p.Standby[task], tags[owner], owner)
		}
	}
}

// TestAssignRackAwareRandom checks the invariants and distinctness on random
// groups in random racks, and that one rack for all is as no tags.
func TestAssignRackAwareRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 13))
	for round := range 200 {
		var tasks []topo.TaskID
		for s := range 1 + rng.IntN(2) {
			tasks = append(tasks, tasksOf(s, int32(1+rng.IntN(10)))...)
		}
		standbys := rng.IntN(4)
		var members, untagged, oneRack []Member
		for i := range 1 + rng.IntN(7) {
			m := member(fmt.Sprintf("p%02d", i))
			m.Info.Standby = []topo.TaskID{tasks[rng.IntN(len(tasks))]}
			m.Info.OffsetSums = map[topo.TaskID]int64{tasks[rng.IntN(len(tasks))]: rng.Int64N(100)}
			untagged = append(untagged, m)
			oneRack = append(oneRack, withTags(m, "rack", "r"))
			if r := rng.IntN(4); r > 0 {
				m = withTags(m, "rack", fmt.Sprint("r", r))
			}
			members = append(members, m)
		}
		plan, err := Assign(members, tasks, standbys)
		if err != nil {
			t.Fatal(err)
		}
		checkPlaced(t, plan, members, tasks, standbys)
		checkDistinct(t, plan, members)
		want, err := Assign(untagged, tasks, standbys)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := Assign(oneRack, tasks, standbys); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("one rack for all gave\n%s\nwithout tags\n%s", render(got, oneRack), render(want, untagged))
		}
		if t.Failed() {
			t.Fatalf("round %d:\n%s", round, render(plan, members))
		}
	}
}

// TestDistinctness checks the count of differing keys: a key counts when the
// value differs from every other's, a missing tag being "".
func TestDistinctness(t *testing.T) {
	m := func(kv ...string) map[string]string {
		r := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			r[kv[i]] = kv[i+1]
		}
		return r
	}
	for _, c := range []struct {
		tags   map[string]string
		others []map[string]string
		want   int
	}{
		{nil, nil, 0},
		{m("rack", "r1"), []map[string]string{m("rack", "r2")}, 1},
		{m("rack", "r1"), []map[string]string{m("rack", "r1")}, 0},
		{nil, []map[string]string{m("rack", "r1"), m("rack", "r2")}, 1},
		{nil, []map[string]string{m("rack", "r1"), nil}, 0},
		{m("zone", "z1", "cluster", "k1"), []map[string]string{m("zone", "z2", "cluster", "k2"), m("zone", "z3", "cluster", "k1")}, 1},
		// zone differs from both; cluster: "" differs from k2 and k1; x: ""
		// is also the first map's value.
		{m("zone", "z1"), []map[string]string{m("zone", "z2", "cluster", "k2"), m("cluster", "k1", "x", "y")}, 2},
	} {
		if got := distinctness(c.tags, c.others); got != c.want {
			t.Errorf("distinctness(%v, %v) = %d, want %d", c.tags, c.others, got, c.want)
		}
	}
}

// inst builds an instance whose member id is "m-" + its process id, with
// the tags of key-value pairs kv.
func inst(process string, kv ...string) Instance {
	in := Instance{MemberID: "m-" + process, InstanceID: process}
	if len(kv) > 0 {
		in.Tags = map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			in.Tags[kv[i]] = kv[i+1]
		}
	}
	return in
}

func TestExplain(t *testing.T) {
	p1, p2, p3, p4 := inst("p1", "rack", "r1"), inst("p2", "rack", "r2"), inst("p3", "rack", "r1"), inst("p4", "rack", "r2")
	for _, tc := range []struct {
		name    string
		members []Instance
		tasks   map[topo.TaskID]Placement
		want    map[topo.TaskID]string
	}{{
		name:    "standbys in the other rack; none, no sentence",
		members: []Instance{p1, p2, p3},
		tasks: map[topo.TaskID]Placement{
			tk(0, 0): {Active: p1, Standbys: []Instance{p2}},
			tk(0, 1): {Active: p2, Standbys: []Instance{p3}},
			tk(0, 2): {Active: p3},
		},
		want: map[topo.TaskID]string{
			tk(0, 0): "standby on p2 (rack=r2): differs from the active p1 (rack=r1) in rack",
			tk(0, 1): "standby on p3 (rack=r1): differs from the active p2 (rack=r2) in rack",
		},
	}, {
		name:    "one rack",
		members: []Instance{p1, p3},
		tasks:   map[topo.TaskID]Placement{tk(0, 0): {Active: p1, Standbys: []Instance{p3}}},
		want:    map[topo.TaskID]string{tk(0, 0): "standby on p3 (rack=r1): same tags as the active p1 — no instance has other tags"},
	}, {
		name:    "the other rack holds a standby already",
		members: []Instance{p1, p2, p3},
		tasks:   map[topo.TaskID]Placement{tk(0, 0): {Active: p1, Standbys: []Instance{p2, p3}}},
		want: map[topo.TaskID]string{tk(0, 0): "standby on p2 (rack=r2): differs from the active p1 (rack=r1) in rack; " +
			"standby on p3 (rack=r1): same tags as the active p1 — every instance with other tags holds another standby"},
	}, {
		name:    "a free instance in the other rack is no more distinct",
		members: []Instance{p1, p2, p3, p4},
		tasks:   map[topo.TaskID]Placement{tk(0, 0): {Active: p1, Standbys: []Instance{p2, p3}}},
		want: map[topo.TaskID]string{tk(0, 0): "standby on p2 (rack=r2): differs from the active p1 (rack=r1) in rack; " +
			"standby on p3 (rack=r1): same tags as the active p1 — no free instance is more distinct"},
	}, {
		name:    "a free instance in a third rack is more distinct",
		members: []Instance{p1, p2, p3, inst("p5", "rack", "r3")},
		tasks:   map[topo.TaskID]Placement{tk(0, 0): {Active: p1, Standbys: []Instance{p2, p3}}},
		want: map[topo.TaskID]string{tk(0, 0): "standby on p2 (rack=r2): differs from the active p1 (rack=r1) in rack; " +
			"standby on p3 (rack=r1): same tags as the active p1 — kept for balance"},
	}, {
		name:    "two tags; a missing one",
		members: []Instance{inst("a", "zone", "z1", "cluster", "k1"), inst("b", "zone", "z2", "cluster", "k2"), inst("c", "zone", "z1")},
		tasks: map[topo.TaskID]Placement{
			tk(0, 0): {Active: inst("a", "zone", "z1", "cluster", "k1"), Standbys: []Instance{inst("b", "zone", "z2", "cluster", "k2")}},
			tk(0, 1): {Active: inst("a", "zone", "z1", "cluster", "k1"), Standbys: []Instance{inst("c", "zone", "z1")}},
			tk(0, 2): {Active: inst("c", "zone", "z1"), Standbys: []Instance{inst("b", "zone", "z2", "cluster", "k2")}},
		},
		want: map[topo.TaskID]string{
			tk(0, 0): "standby on b (cluster=k2,zone=z2): differs from the active a (cluster=k1,zone=z1) in cluster, zone",
			tk(0, 1): "standby on c (zone=z1): differs from the active a (cluster=k1,zone=z1) in cluster",
			tk(0, 2): "standby on b (cluster=k2,zone=z2): differs from the active c (zone=z1) in cluster, zone",
		},
	}, {
		name:    "no tags",
		members: []Instance{inst("a"), inst("b")},
		tasks:   map[topo.TaskID]Placement{tk(0, 0): {Active: inst("a"), Standbys: []Instance{inst("b")}}},
		want:    map[topo.TaskID]string{tk(0, 0): "standby on b: no instance has tags, placed by state and balance"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			a := Assignment{Members: tc.members, Tasks: tc.tasks}
			if got := a.Explain(); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Explain() =\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

// sumsOf gives every task the same offset sum.
func sumsOf(sum int64, ts ...topo.TaskID) map[topo.TaskID]int64 {
	m := map[topo.TaskID]int64{}
	for _, t := range ts {
		m[t] = sum
	}
	return m
}

// Warm-ups: a task the balanced plan moves to a member that lags by more
// than the acceptable recovery lag stays with its previous owner, and the
// new member warms it up, within the group's bound; a member within the
// lag, a task whose state is small, and a task whose previous owner has
// left with no one else holding its state move at once.
func TestAssignWarmups(t *testing.T) {
	ts := tasksOf(0, 4)
	w := Warmups{Max: 2, AcceptableLag: 10000}
	a := withSums(member("a", ts...), sumsOf(50000, ts...))
	cases := []struct {
		name    string
		members []Member
		w       Warmups
		want    string
		warm    map[topo.TaskID]string
	}{
		{"new member without state", []Member{a, member("b")}, w,
			"m-a: 0_0 0_1 0_2 0_3 | \nm-b:  | 0_2 0_3\n", map[topo.TaskID]string{tk(0, 2): "m-b", tk(0, 3): "m-b"}},
		{"one warm-up at a time", []Member{a, member("b")}, Warmups{Max: 1, AcceptableLag: 10000},
			"m-a: 0_0 0_1 0_2 0_3 | \nm-b:  | 0_2\n", map[topo.TaskID]string{tk(0, 2): "m-b"}},
		{"new member caught up", []Member{a, withSums(member("b"), sumsOf(45000, ts...))}, w,
			"m-a: 0_0 0_1 | \nm-b: 0_2 0_3 | \n", nil},
		{"small state", []Member{withSums(member("a", ts...), sumsOf(9000, ts...)), member("b")}, w,
			"m-a: 0_0 0_1 | \nm-b: 0_2 0_3 | \n", nil},
		{"previous owner gone", []Member{member("b"), member("c")}, w,
			"m-b: 0_0 0_2 | \nm-c: 0_1 0_3 | \n", nil},
		{"no warm-ups", []Member{a, member("b")}, Warmups{},
			"m-a: 0_0 0_1 | \nm-b: 0_2 0_3 | \n", nil},
	}
	for _, c := range cases {
		p, err := AssignWarm(c.members, ts, 0, c.w)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := render(p, c.members); got != c.want {
			t.Errorf("%s: plan\n%s\nwant\n%s", c.name, got, c.want)
		}
		if len(p.Warmup) != len(c.warm) || !reflect.DeepEqual(p.Warmup, c.warm) && len(c.warm) > 0 {
			t.Errorf("%s: warm-ups %v, want %v", c.name, p.Warmup, c.warm)
		}
	}
}

// With standbys, a task kept by its previous owner never has that owner as
// its standby too, and a warm-up comes on top of the task's standbys.
func TestAssignWarmupsWithStandbys(t *testing.T) {
	ts := tasksOf(0, 4)
	a := withStandby(withSums(member("a", ts[:2]...), sumsOf(50000, ts...)), ts[2:]...)
	b := withStandby(withSums(member("b", ts[2:]...), sumsOf(50000, ts...)), ts[:2]...)
	members := []Member{a, b, member("c")}
	p, err := AssignWarm(members, ts, 1, Warmups{Max: 1, AcceptableLag: 10000})
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range ts {
		if slices.Contains(p.Standby[task], p.Active[task]) {
			t.Errorf("task %s: active on %s, also its standby: %v", task, p.Active[task], p.Standby[task])
		}
		want := 1 // and the warm-up, beyond the standbys
		if _, ok := p.Warmup[task]; ok {
			want = 2
		}
		if len(p.Standby[task]) != want {
			t.Errorf("task %s: standbys %v (warm-up %q), want %d", task, p.Standby[task], p.Warmup[task], want)
		}
	}
	// c has no state: every task stays where it ran.
	for _, task := range ts {
		want := "m-a"
		if task.Partition >= 2 {
			want = "m-b"
		}
		if p.Active[task] != want {
			t.Errorf("task %s on %s, want %s (where it ran)", task, p.Active[task], want)
		}
	}
	if len(p.Warmup) > 1 {
		t.Errorf("warm-ups %v, more than the bound of 1", p.Warmup)
	}
	if _, err := AssignWarm(members, ts, 1, Warmups{Max: -1}); err == nil {
		t.Error("a negative warm-up bound was accepted")
	}
}

// When an instance leaves, each of its tasks goes to a member whose state of
// it is caught up, its standby, even where balance would put it elsewhere
// (Kafka Streams' HighAvailabilityTaskAssignor): the member balance picks
// keeps a replica of it and takes it once caught up. A settled group of N
// members, one standby, loses each member in turn.
func TestAssignWarmupsAfterLeave(t *testing.T) {
	ts := tasksOf(0, 12)
	w := Warmups{Max: 2, AcceptableLag: 10000}
	for _, n := range []int{2, 3, 4, 6} {
		var all []Member
		for i := range n {
			all = append(all, member(string(rune('a'+i))))
		}
		all = settle(t, all, ts, 1)
		for gone := range all {
			name := fmt.Sprintf("N=%d, %s left", n, all[gone].ID)
			members := slices.Delete(slices.Clone(all), gone, gone+1)
			p, err := AssignWarm(members, ts, 1, w)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			byID := map[string]Member{}
			for _, m := range members {
				byID[m.ID] = m
			}
			for _, task := range ts {
				// The most caught-up state of the task among those who stay.
				best := int64(0)
				for _, m := range members {
					best = max(best, m.Info.OffsetSums[task])
				}
				owner := p.Active[task]
				if lag := best - byID[owner].Info.OffsetSums[task]; lag > w.AcceptableLag {
					t.Errorf("%s: task %s active on %s, %d records behind the most caught-up member", name, task, owner, lag)
				}
				for _, m := range members {
					if slices.Contains(m.Info.Active, task) && owner != m.ID {
						t.Errorf("%s: task %s moved from %s, which stayed, to %s", name, task, m.ID, owner)
					}
				}
			}
			for _, task := range ts {
				reps := p.Standby[task]
				if len(reps) == 0 && n > 2 || slices.Contains(reps, p.Active[task]) {
					t.Errorf("%s: task %s active on %s, standbys %v", name, task, p.Active[task], reps)
				}
			}
			if t.Failed() {
				t.Fatalf("%s:\n%s", name, render(p, members))
			}
			// Once the warm-ups have caught up, the probing rebalance
			// evens the counts, every task still on caught-up state.
			for i := range members {
				active, standby := p.Of(members[i].ID)
				sums := map[topo.TaskID]int64{}
				for _, task := range active {
					sums[task] = scaleSum(task)
				}
				for _, task := range standby {
					sums[task] = scaleSum(task) - 100
				}
				members[i].Info.Active, members[i].Info.Standby, members[i].Info.OffsetSums = active, standby, sums
				byID[members[i].ID] = members[i]
			}
			if p, err = AssignWarm(members, ts, 1, w); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			checkPlan(t, p, members, ts, 1)
			for _, task := range ts {
				if _, ok := byID[p.Active[task]].Info.OffsetSums[task]; !ok {
					t.Errorf("%s, after the warm-ups: task %s on %s, which has no state of it", name, task, p.Active[task])
				}
			}
			if t.Failed() {
				t.Fatalf("%s, after the warm-ups:\n%s", name, render(p, members))
			}
		}
	}
}
