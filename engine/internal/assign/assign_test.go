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
	return Member{ID: "m-" + process, Info: MemberInfo{ProcessID: process, Active: active}}
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

// checkPlan checks what every plan must satisfy.
func checkPlan(t *testing.T, p Plan, members []Member, tasks []topo.TaskID, standbys int) {
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
	slo, shi := len(tasks)*standbys, 0
	for id := range ids {
		active, standby := p.Of(id)
		lo, hi = min(lo, len(active)), max(hi, len(active))
		slo, shi = min(slo, len(standby)), max(shi, len(standby))
	}
	if hi-lo > 1 {
		t.Errorf("active task counts range from %d to %d", lo, hi)
	}
	if shi-slo > 1 {
		t.Errorf("standby task counts range from %d to %d", slo, shi)
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
