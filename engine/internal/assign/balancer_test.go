package assign

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
	"github.com/oxbow-dev/oxbow/internal/await"
)

// syncGroup runs one rebalance by hand, as franz-go does on the leader and
// the followers, and returns what each member's ParseSyncAssignment returned.
func syncGroup(t *testing.T, leader *Balancer, bs map[string]*Balancer, partitions map[string]int32, topics []string) (map[string]map[string][]int32, error) {
	t.Helper()
	return syncOwned(t, leader, bs, partitions, topics, nil)
}

// syncOwned is syncGroup with the partitions each member says it owns (the
// cooperative protocol's OwnedPartitions).
func syncOwned(t *testing.T, leader *Balancer, bs map[string]*Balancer, partitions map[string]int32, topics []string, owned map[string]map[string][]int32) (map[string]map[string][]int32, error) {
	t.Helper()
	var members []kmsg.JoinGroupResponseMember
	for _, id := range slices.Sorted(maps.Keys(bs)) {
		m := kmsg.NewJoinGroupResponseMember()
		m.MemberID = id
		m.ProtocolMetadata = bs[id].JoinGroupMetadata(topics, owned[id], 1)
		members = append(members, m)
	}
	gmb, wanted, err := leader.MemberBalancer(members)
	if err != nil {
		t.Fatal(err)
	}
	for tp := range partitions {
		if _, ok := wanted[tp]; !ok {
			t.Errorf("MemberBalancer does not ask for topic %q", tp)
		}
	}
	into, err := gmb.(kgo.GroupMemberBalancerOrError).BalanceOrError(partitions)
	if err != nil {
		return nil, err
	}
	got := map[string]map[string][]int32{}
	for _, sa := range into.IntoSyncAssignment() {
		assigned, err := bs[sa.MemberID].ParseSyncAssignment(sa.MemberAssignment)
		if err != nil {
			t.Fatal(err)
		}
		got[sa.MemberID] = assigned
	}
	return got, nil
}

func TestBalancerWithoutKafka(t *testing.T) {
	groups := []Group{{Sub: 0, Topics: []string{"orders", "payments"}}, {Sub: 1, Topics: []string{"rekeyed"}}}
	partitions := map[string]int32{"orders": 3, "payments": 3, "rekeyed": 2}
	bs := map[string]*Balancer{}
	for _, id := range []string{"m1", "m2"} {
		var b *Balancer
		b = New(Config{Groups: groups, Standbys: 1, Metadata: func() MemberInfo {
			cur := b.Current()
			return MemberInfo{InstanceID: "p-" + id, Addr: "http://" + id, Active: cur.Active, Standby: cur.Standby}
		}})
		bs[id] = b
	}
	if g := bs["m1"].Current().Generation; g != -1 {
		t.Errorf("generation before the first assignment = %d, want -1", g)
	}
	got, err := syncGroup(t, bs["m1"], bs, partitions, []string{"orders", "payments", "rekeyed"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string][]int32{
		"m1": {"orders": {0, 2}, "payments": {0, 2}, "rekeyed": {1}},
		"m2": {"orders": {1}, "payments": {1}, "rekeyed": {0}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("assigned %v, want %v", got, want)
	}
	a1, a2 := bs["m1"].Current(), bs["m2"].Current()
	if !reflect.DeepEqual(a1.Tasks, a2.Tasks) || !reflect.DeepEqual(a1.Members, a2.Members) {
		t.Errorf("members disagree on the owner map:\n%v\n%v", a1.Tasks, a2.Tasks)
	}
	if a1.Self.InstanceID != "p-m1" || a2.Self.Addr != "http://m2" {
		t.Errorf("self: %+v, %+v", a1.Self, a2.Self)
	}
	if s := fmt.Sprint(a1.Active, a1.Standby, a2.Active, a2.Standby); s != "[0_0 0_2 1_1] [0_1 1_0] [0_1 1_0] [0_0 0_2 1_1]" {
		t.Errorf("active and standby tasks: %s", s)
	}
	if !maps.Equal(a1.Partitions, map[int]int32{0: 3, 1: 2}) {
		t.Errorf("partitions = %v", a1.Partitions)
	}
	key := []byte("customer-17")
	task, pl, ok := a2.KeyOwner(0, key)
	if !ok || task != (topo.TaskID{Sub: 0, Partition: Partition(key, 3)}) || !reflect.DeepEqual(pl, a1.Tasks[task]) {
		t.Errorf("KeyOwner = %v %+v %v", task, pl, ok)
	}

	// A second rebalance with the same members changes nothing.
	again, err := syncGroup(t, bs["m2"], bs, partitions, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again, want) {
		t.Errorf("second rebalance assigned %v, want %v", again, want)
	}

	// Co-partitioned topics that disagree fail the rebalance.
	partitions["payments"] = 4
	_, err = syncGroup(t, bs["m1"], bs, partitions, nil)
	var cpe *CoPartitionError
	if !errors.As(err, &cpe) || !strings.Contains(err.Error(), "orders (3), payments (4)") {
		t.Errorf("err = %v, want a co-partitioning error naming the counts", err)
	}
}

// TestBalancerFollowUp checks the two rebalances that move a task
// cooperatively: the first leaves a moving task out of its new owner's
// partitions while the old one still owns it, and tells the new owner that a
// second follows (FollowUp); in the second, the task goes to it.
func TestBalancerFollowUp(t *testing.T) {
	groups := []Group{{Sub: 0, Topics: []string{"orders"}}}
	partitions := map[string]int32{"orders": 6}
	bs := map[string]*Balancer{}
	add := func(id string) {
		var b *Balancer
		b = New(Config{Groups: groups, Metadata: func() MemberInfo {
			cur := b.Current()
			return MemberInfo{InstanceID: "p-" + id, Active: cur.Active}
		}})
		bs[id] = b
	}
	add("m1")
	add("m2")
	two, err := syncGroup(t, bs["m1"], bs, partitions, []string{"orders"})
	if err != nil {
		t.Fatal(err)
	}
	for id, b := range bs {
		if b.Current().FollowUp {
			t.Errorf("%s: FollowUp after a rebalance in which nothing was owned", id)
		}
	}
	add("m3")
	first, err := syncOwned(t, bs["m1"], bs, partitions, []string{"orders"}, two)
	if err != nil {
		t.Fatal(err)
	}
	if len(first["m3"]["orders"]) != 0 || len(bs["m3"].Current().Active) == 0 {
		t.Fatalf("first rebalance: m3 was given %v of its planned tasks %v; want none of them yet", first["m3"], bs["m3"].Current().Active)
	}
	if !bs["m3"].Current().FollowUp {
		t.Error("m3: no FollowUp, though its planned tasks were withheld")
	}
	for _, id := range []string{"m1", "m2"} {
		if bs[id].Current().FollowUp {
			t.Errorf("%s: FollowUp, though it was given every task planned for it", id)
		}
	}
	// The old owners revoked what they lost; m3 owns nothing yet.
	second, err := syncOwned(t, bs["m1"], bs, partitions, []string{"orders"}, first)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(second["m1"]["orders"]) + len(second["m2"]["orders"]) + len(second["m3"]["orders"]); n != 6 || len(second["m3"]["orders"]) == 0 {
		t.Errorf("second rebalance assigned %v; want all six partitions, m3 some", second)
	}
	for id, b := range bs {
		if b.Current().FollowUp {
			t.Errorf("%s: FollowUp after the rebalance that moved the tasks", id)
		}
	}
}

// TestBalancerTags checks that tags go from each member's Metadata through
// the leader to every member, which explains the placement alike.
func TestBalancerTags(t *testing.T) {
	groups := []Group{{Sub: 0, Topics: []string{"orders"}}}
	racks := map[string]string{"m1": "r1", "m2": "r1", "m3": "r2"}
	bs := map[string]*Balancer{}
	for id, rack := range racks {
		bs[id] = New(Config{Groups: groups, Standbys: 1, Metadata: func() MemberInfo {
			return MemberInfo{InstanceID: "p-" + id, Tags: map[string]string{"rack": rack}}
		}})
	}
	if _, err := syncGroup(t, bs["m1"], bs, map[string]int32{"orders": 3}, []string{"orders"}); err != nil {
		t.Fatal(err)
	}
	a := bs["m2"].Current()
	for _, m := range a.Members {
		if want := racks[m.MemberID]; m.Tags["rack"] != want || len(m.Tags) != 1 {
			t.Errorf("member %s has tags %v, want rack=%s", m.MemberID, m.Tags, want)
		}
	}
	want := map[topo.TaskID]string{
		{Partition: 0}: "standby on p-m3 (rack=r2): differs from the active p-m1 (rack=r1) in rack",
		{Partition: 1}: "standby on p-m3 (rack=r2): differs from the active p-m2 (rack=r1) in rack",
		{Partition: 2}: "standby on p-m1 (rack=r1): differs from the active p-m3 (rack=r2) in rack",
	}
	for id, b := range bs {
		if got := b.Current().Explain(); !reflect.DeepEqual(got, want) {
			t.Errorf("%s explains\n%q\nwant\n%q", id, got, want)
		}
	}
}

func TestNewPanicsOnWiringMistakes(t *testing.T) {
	for _, cfg := range []Config{
		{Standbys: -1},
		{Groups: []Group{{Sub: 0}}},
		{Groups: []Group{{Sub: 0, Topics: []string{"a"}}, {Sub: 0, Topics: []string{"b"}}}},
		{Groups: []Group{{Sub: 0, Topics: []string{"a"}}, {Sub: 1, Topics: []string{"a"}}}},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("New(%+v) did not panic", cfg)
				}
			}()
			New(cfg)
		}()
	}
}

// instance is one group member in the kfake test: a client and its balancer.
type instance struct {
	name string
	b    *Balancer
	cl   *kgo.Client

	mu       sync.Mutex
	assigned map[string][]int32 // what the client consumes now
	revoked  int                // partitions revoked so far
	double   []string           // partitions assigned while another instance had them
}

// owners is what every instance of a test consumes, to catch a partition
// assigned to two at once.
var (
	ownersMu sync.Mutex
	owners   = map[string]string{} // "topic/partition" → instance
)

func (in *instance) consuming() map[string][]int32 {
	in.mu.Lock()
	defer in.mu.Unlock()
	return maps.Clone(in.assigned)
}

func startInstance(t *testing.T, brokers []string, group string, groups []Group, topics []string, name string) *instance {
	in := &instance{name: name, assigned: map[string][]int32{}}
	in.b = New(Config{Groups: groups, Standbys: 1, Metadata: func() MemberInfo {
		cur := in.b.Current()
		return MemberInfo{InstanceID: name, Addr: "http://" + name + ":8080", Active: cur.Active, Standby: cur.Standby}
	}})
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topics...),
		kgo.Balancers(in.b),
		kgo.HeartbeatInterval(50*time.Millisecond),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			in.mu.Lock()
			defer in.mu.Unlock()
			ownersMu.Lock()
			defer ownersMu.Unlock()
			for tp, ps := range m {
				in.assigned[tp] = append(in.assigned[tp], ps...)
				for _, p := range ps {
					k := fmt.Sprintf("%s/%d", tp, p)
					if o, ok := owners[k]; ok && o != name {
						in.double = append(in.double, k+" (also "+o+")")
					}
					owners[k] = name
				}
			}
		}),
		// Cooperative: what is assigned and revoked is what changes.
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			in.mu.Lock()
			defer in.mu.Unlock()
			ownersMu.Lock()
			defer ownersMu.Unlock()
			for tp, ps := range m {
				in.assigned[tp] = slices.DeleteFunc(in.assigned[tp], func(p int32) bool { return slices.Contains(ps, p) })
				in.revoked += len(ps)
				for _, p := range ps {
					if k := fmt.Sprintf("%s/%d", tp, p); owners[k] == name {
						delete(owners, k)
					}
				}
			}
		}),
	)
	if err != nil {
		t.Fatal(err)
	}
	in.cl = cl
	return in
}

// settled checks that every instance consumes whole tasks, that together
// they consume every task once, and that they agree on the owner map of one
// generation with exactly them as members. It returns why not, or "".
func settled(ins []*instance, topics []string, partitions int32) string {
	first := ins[0].b.Current()
	owner := map[int32]string{}
	for _, in := range ins {
		cur := in.b.Current()
		if cur.Generation != first.Generation || !reflect.DeepEqual(cur.Tasks, first.Tasks) || !reflect.DeepEqual(cur.Members, first.Members) {
			return fmt.Sprintf("%s has generation %d, %s has %d or another owner map", in.name, cur.Generation, ins[0].name, first.Generation)
		}
		if len(cur.Members) != len(ins) {
			return fmt.Sprintf("generation %d has %d members, want %d", cur.Generation, len(cur.Members), len(ins))
		}
		if cur.Self.InstanceID != in.name {
			return fmt.Sprintf("%s thinks it is %q", in.name, cur.Self.InstanceID)
		}
		c := in.consuming()
		var mine []int32
		for _, task := range cur.Active {
			mine = append(mine, task.Partition)
		}
		for _, tp := range topics {
			ps := slices.Sorted(slices.Values(c[tp]))
			if !slices.Equal(ps, mine) {
				return fmt.Sprintf("%s consumes %s %v but its tasks are %v", in.name, tp, ps, cur.Active)
			}
		}
		for _, p := range mine {
			if o, dup := owner[p]; dup {
				return fmt.Sprintf("task 0_%d is active on %s and %s", p, o, in.name)
			}
			owner[p] = in.name
			if pl := cur.Tasks[topo.TaskID{Partition: p}]; pl.Active.InstanceID != in.name {
				return fmt.Sprintf("the owner map says task 0_%d runs on %s, not %s", p, pl.Active.InstanceID, in.name)
			}
		}
	}
	if len(owner) != int(partitions) {
		return fmt.Sprintf("%d of %d tasks are consumed", len(owner), partitions)
	}
	for task, pl := range first.Tasks {
		if len(pl.Standbys) != 1 || pl.Standbys[0].InstanceID == pl.Active.InstanceID {
			return fmt.Sprintf("task %s has standbys %+v and active %+v", task, pl.Standbys, pl.Active)
		}
		if !strings.HasSuffix(pl.Active.Addr, ":8080") {
			return fmt.Sprintf("task %s has owner address %q", task, pl.Active.Addr)
		}
	}
	return ""
}

func awaitSettled(t *testing.T, ins []*instance, topics []string, partitions int32) {
	t.Helper()
	await.NoError(t, 30*time.Second, "the group to settle", func() error {
		if why := settled(ins, topics, partitions); why != "" {
			return errors.New(why)
		}
		return nil
	})
}

func TestBalancerOnKfake(t *testing.T) {
	topics := []string{"customers", "orders"}
	const partitions = 4
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topics...))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	groups := []Group{{Sub: 0, Topics: topics}}

	var ins []*instance
	for _, name := range []string{"a", "b", "c"} {
		in := startInstance(t, c.ListenAddrs(), "oxbow-app-v1", groups, topics, name)
		defer in.cl.Close()
		ins = append(ins, in)
	}
	awaitSettled(t, ins, topics, partitions)
	logPlacement(t, ins[0].b.Current())

	// Close the instance with the most tasks; its tasks move, the others'
	// stay.
	slices.SortStableFunc(ins, func(x, y *instance) int { return len(y.b.Current().Active) - len(x.b.Current().Active) })
	gone, stay := ins[0], ins[1:]
	before := map[string][]topo.TaskID{}
	for _, in := range stay {
		before[in.name] = in.b.Current().Active
	}
	moving := gone.b.Current().Active
	gen := gone.b.Current().Generation
	revokedBefore := map[string]int{}
	for _, in := range stay {
		in.mu.Lock()
		revokedBefore[in.name] = in.revoked
		in.mu.Unlock()
	}
	gone.cl.Close()
	awaitSettled(t, stay, topics, partitions)
	// Cooperative: the instances that stay gave up nothing; and no
	// partition was ever assigned to two instances at once.
	for _, in := range ins {
		in.mu.Lock()
		if in != gone && in.revoked != revokedBefore[in.name] {
			t.Errorf("%s revoked %d partitions when %s left; a cooperative rebalance revokes only what moves", in.name, in.revoked-revokedBefore[in.name], gone.name)
		}
		if len(in.double) > 0 {
			t.Errorf("%s was assigned partitions another instance still had: %v", in.name, in.double)
		}
		in.mu.Unlock()
	}

	cur := stay[0].b.Current()
	logPlacement(t, cur)
	if cur.Generation <= gen {
		t.Errorf("generation %d after the leave, %d before", cur.Generation, gen)
	}
	for _, in := range stay {
		now := in.b.Current().Active
		for _, task := range before[in.name] {
			if !slices.Contains(now, task) {
				t.Errorf("%s lost task %s when %s left: had %v, has %v", in.name, task, gone.name, before[in.name], now)
			}
		}
	}
	for _, task := range moving {
		if p := cur.Tasks[task].Active.InstanceID; p == gone.name || p == "" {
			t.Errorf("task %s is on %q after %s left", task, p, gone.name)
		}
	}
}

func logPlacement(t *testing.T, a Assignment) {
	t.Helper()
	for _, task := range slices.SortedFunc(maps.Keys(a.Tasks), compareTasks) {
		pl := a.Tasks[task]
		t.Logf("generation %d: task %s active on %s, standby on %s", a.Generation, task, pl.Active.InstanceID, pl.Standbys[0].InstanceID)
	}
}
