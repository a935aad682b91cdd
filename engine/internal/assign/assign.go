package assign

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
)

// Group is one task-generating sub-topology as the balancer sees it: its id
// and the real (prefixed) names of its source topics, which are
// co-partitioned: task (Sub, p) reads partition p of every one of them.
type Group struct {
	Sub    int
	Topics []string
}

// GroupsOf lists the sub-topologies of t that make tasks (global ones do not),
// resolving topic names with name.
func GroupsOf(t *topo.Topology, name func(topo.TopicRef) string) []Group {
	var gs []Group
	for _, sub := range t.Subs {
		if sub.Global {
			continue
		}
		g := Group{Sub: sub.ID}
		for _, ref := range sub.SourceTopics() {
			g.Topics = append(g.Topics, name(ref))
		}
		gs = append(gs, g)
	}
	return gs
}

// ErrUnknownTopic is wrapped by the error of [Tasks] when a source topic has
// no partition count: it does not exist (yet), or metadata could not load it.
var ErrUnknownTopic = errors.New("assign: unknown source topic")

// CoPartitionError says that the co-partitioned source topics of one
// sub-topology have different partition counts, so its tasks are undefined.
type CoPartitionError struct {
	Sub        int
	Topics     []string // sorted
	Partitions []int32  // Partitions[i] is the count of Topics[i]
}

func (e *CoPartitionError) Error() string {
	parts := make([]string, len(e.Topics))
	for i, t := range e.Topics {
		parts[i] = fmt.Sprintf("%s (%d)", t, e.Partitions[i])
	}
	return fmt.Sprintf("assign: sub-topology %d reads co-partitioned topics with different partition counts: %s; "+
		"give them the same number of partitions", e.Sub, strings.Join(parts, ", "))
}

// Tasks lists the tasks of groups, sorted, given the partition count of each
// topic. Every problem is reported: topics with no count (wrapping
// [ErrUnknownTopic]) and sub-topologies whose topics disagree on the count
// ([*CoPartitionError]).
func Tasks(groups []Group, partitions map[string]int32) ([]topo.TaskID, error) {
	var tasks []topo.TaskID
	var errs []error
	for _, g := range groups {
		topics := slices.Sorted(slices.Values(g.Topics))
		counts := make([]int32, len(topics))
		ok := len(topics) > 0
		for i, t := range topics {
			n, found := partitions[t]
			if !found || n <= 0 {
				errs = append(errs, fmt.Errorf("%w: sub-topology %d reads topic %q, which has no partitions in the cluster metadata", ErrUnknownTopic, g.Sub, t))
				ok = false
				continue
			}
			counts[i] = n
		}
		if !ok {
			continue
		}
		if slices.Min(counts) != slices.Max(counts) {
			errs = append(errs, &CoPartitionError{Sub: g.Sub, Topics: topics, Partitions: counts})
			continue
		}
		for p := range counts[0] {
			tasks = append(tasks, topo.TaskID{Sub: g.Sub, Partition: p})
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	slices.SortFunc(tasks, compareTasks)
	return tasks, nil
}

// Member is one group member as [Assign] sees it.
type Member struct {
	ID   string // the group member id; unique in one balance
	Info MemberInfo
}

// MemberInfo is what a member tells the leader about itself when it joins.
type MemberInfo struct {
	// InstanceID names the instance stably across restarts and rejoins (a
	// group member id changes when a process restarts).
	InstanceID string
	// Addr is the instance's advertised HTTP address; empty if it serves none.
	Addr string
	// Tags are the instance's client tags, such as {"rack": "r1"} or
	// {"zone": "eu-1a", "cluster": "k1"}: standbys go to instances whose
	// tags differ from the active's (see [Assign]). A missing tag and an
	// empty value are the same.
	Tags map[string]string
	// Active and Standby are the tasks the member ran in the last generation.
	Active  []topo.TaskID
	Standby []topo.TaskID
	// OffsetSums holds, for each task whose state the instance keeps locally,
	// how caught up that state is: the sum of the task's changelog offsets the
	// local state reflects (as Kafka Streams' task offset sums). Larger is
	// more caught up; only sums of the same task are ever compared.
	OffsetSums map[topo.TaskID]int64
}

// Plan is the result of [Assign].
type Plan struct {
	Active  map[topo.TaskID]string   // task -> member id
	Standby map[topo.TaskID][]string // task -> member ids, in member order
	// Warmup: task -> the member that is to run it once its state has
	// caught up, which keeps a warm-up replica of it meanwhile (see
	// [Warmups]). It is also among the task's standbys.
	Warmup map[topo.TaskID]string
}

// Warmups configures warm-up replicas, as Kafka Streams'
// max.warmup.replicas and acceptable.recovery.lag (KIP-441): a task the
// balanced plan would give to a member whose state of it is more than
// AcceptableLag records behind stays with its previous, caught-up owner (or,
// if that owner has left, goes to a member whose state is caught up, such as
// its standby), and the new member keeps a warm-up replica of it (a standby)
// until it has caught up, when a rebalance (a probing one, asked for by the
// member) moves it. Max bounds the warm-up replicas of the group at a time;
// a task beyond it stays where it is until a later rebalance has room. Max 0
// moves tasks at once, restored by their new owner.
type Warmups struct {
	Max           int
	AcceptableLag int64
}

// Of returns the tasks a member runs active and standby, sorted.
func (p Plan) Of(member string) (active, standby []topo.TaskID) {
	for t, m := range p.Active {
		if m == member {
			active = append(active, t)
		}
	}
	for t, ms := range p.Standby {
		if slices.Contains(ms, member) {
			standby = append(standby, t)
		}
	}
	slices.SortFunc(active, compareTasks)
	slices.SortFunc(standby, compareTasks)
	return active, standby
}

// Assign places every task on exactly one member and up to standbys replicas
// of it on other members. In order of precedence:
//
//  1. A task stays with the member that ran it active last generation, as
//     long as that member stays within its share (below).
//  2. Otherwise it goes to the member whose local state of it is most caught
//     up (the largest offset sum; a prior standby without a sum ranks below
//     any sum) among those with room.
//  3. The rest fill the members with room, spreading each sub-topology's
//     tasks, then the task counts, evenly.
//  4. Standbys go to members other than the active one, preferring the most
//     distinct (below), then those that hold the task's state (prior
//     standbys, then by offset sum), with standby counts balanced like
//     active ones where the constraints allow.
//
// Each member's share of active tasks is ⌊T/M⌋ or ⌈T/M⌉, so counts differ by
// at most one; with more members than tasks some members stay idle. Members
// are ordered by process id, then member id, which breaks every tie: the same
// input always gives the same plan.
//
// Standbys are rack aware, as with Kafka Streams' rack.aware.assignment.tags.
// A member's distinctness for a replica of task t is the number of tag keys
// (see [MemberInfo].Tags) for which its value differs from the value of t's
// active member and of every replica of t already chosen. A more distinct
// member wins over every other preference, balance included, so when racks
// differ in size the smaller ones hold more standbys; evening out the
// standby counts never moves a replica to a less distinct member. Without
// tags every member's distinctness is 0, and standbys go by state and
// balance alone.
func Assign(members []Member, tasks []topo.TaskID, standbys int) (Plan, error) {
	return AssignWarm(members, tasks, standbys, Warmups{})
}

// AssignWarm is [Assign] with warm-up replicas: after the steps of Assign,
//
//  5. A task that the plan gives to a member whose state of it lags by more
//     than w.AcceptableLag (offset sums; no sum counts as 0) goes instead
//     to a member whose state is caught up: the member that ran it active
//     last generation, whose state is taken as caught up since it ran the
//     task until now; or, if that member has left, the least loaded of the
//     members within w.AcceptableLag of the most caught-up state reported
//     (Kafka Streams' HighAvailabilityTaskAssignor). The planned owner keeps
//     a replica of it instead, as standby if it is one already or if the
//     caught-up member was one (it takes that place), else as a warm-up
//     while fewer than w.Max are placed; the caught-up member is no longer
//     its standby.
//
// A task whose previous owner has left, and whose state no member reports,
// goes where Assign puts it.
func AssignWarm(members []Member, tasks []topo.TaskID, standbys int, w Warmups) (Plan, error) {
	if w.Max < 0 || w.AcceptableLag < 0 {
		return Plan{}, fmt.Errorf("assign: warm-ups %+v; neither can be negative", w)
	}
	if len(members) == 0 {
		return Plan{}, errors.New("assign: no members to assign tasks to")
	}
	if standbys < 0 {
		return Plan{}, fmt.Errorf("assign: %d standbys; the number of standby replicas cannot be negative", standbys)
	}
	ms := slices.Clone(members)
	slices.SortFunc(ms, func(a, b Member) int {
		if c := strings.Compare(a.Info.InstanceID, b.Info.InstanceID); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	for i := 1; i < len(ms); i++ {
		if ms[i].ID == ms[i-1].ID {
			return Plan{}, fmt.Errorf("assign: member id %q appears twice", ms[i].ID)
		}
	}
	ts := slices.Clone(tasks)
	slices.SortFunc(ts, compareTasks)
	for i, t := range ts {
		if t.Partition < 0 || t.Sub < 0 {
			return Plan{}, fmt.Errorf("assign: invalid task %s", t)
		}
		if i > 0 && ts[i-1] == t {
			return Plan{}, fmt.Errorf("assign: task %s appears twice", t)
		}
	}

	a := newAssigner(ms, ts)
	a.sticky()
	a.caughtUp()
	a.fill()
	a.standbys(min(standbys, len(ms)-1))
	warm := a.warmups(w)

	p := Plan{Active: make(map[topo.TaskID]string, len(ts)), Standby: map[topo.TaskID][]string{}, Warmup: map[topo.TaskID]string{}}
	for _, t := range ts {
		p.Active[t] = ms[a.owner[t]].ID
		for _, m := range a.replicas[t] {
			p.Standby[t] = append(p.Standby[t], ms[m].ID)
		}
		if m, ok := warm[t]; ok {
			p.Warmup[t] = ms[m].ID
		}
	}
	return p, nil
}

// warmups is step 5 of [AssignWarm]: it gives back to a caught-up member
// the tasks whose planned owner has not caught up and returns the warm-up
// replicas it placed (also in a.replicas).
func (a *assigner) warmups(w Warmups) map[topo.TaskID]int {
	warm := map[topo.TaskID]int{}
	if w.Max == 0 {
		return warm
	}
	load := slices.Clone(a.active.count)
	for _, t := range a.ts {
		to := a.owner[t]
		from, ok := a.caughtUpMember(t, w.AcceptableLag, load)
		if !ok || to == from || a.sum(from, t)-a.sum(to, t) <= w.AcceptableLag {
			continue
		}
		a.owner[t] = from
		load[to]--
		load[from]++
		rs := slices.DeleteFunc(a.replicas[t], func(m int) bool { return m == from })
		switch {
		case slices.Contains(rs, to):
			// A standby already: it warms up as one.
		case len(rs) < len(a.replicas[t]):
			// The caught-up member was a standby: the planned owner
			// takes that place, and warms up there.
			rs = append(rs, to)
		case len(warm) < w.Max:
			rs = append(rs, to)
			warm[t] = to
		}
		slices.Sort(rs)
		a.replicas[t] = rs
	}
	return warm
}

// sum is m's offset sum of t as step 5 of [AssignWarm] compares them: 0 if
// m reported none.
func (a *assigner) sum(m int, t topo.TaskID) int64 { return a.ms[m].Info.OffsetSums[t] }

// caughtUpMember is the member whose state of t step 5 of [AssignWarm]
// takes as caught up: t's previous owner; if it has left, among the members
// within lag of the largest offset sum reported for t, the one with the
// fewest active tasks (load), then the first. ok is false when t has no
// previous owner and no member reports a sum of it.
func (a *assigner) caughtUpMember(t topo.TaskID, lag int64, load []int) (m int, ok bool) {
	if prev, ok := a.prev[t]; ok {
		return prev, true
	}
	best, found := int64(0), false
	for m := range a.ms {
		if s, ok := a.ms[m].Info.OffsetSums[t]; ok && (!found || s > best) {
			best, found = s, true
		}
	}
	if !found {
		return 0, false
	}
	m = -1
	for i := range a.ms {
		if s, ok := a.ms[i].Info.OffsetSums[t]; ok && best-s <= lag && (m < 0 || load[i] < load[m]) {
			m = i
		}
	}
	return m, true
}

func compareTasks(a, b topo.TaskID) int {
	if a.Sub != b.Sub {
		return a.Sub - b.Sub
	}
	return int(a.Partition) - int(b.Partition)
}

// shares hands out n units among members so that counts differ by at most
// one: everyone may reach lo, and extra members may reach lo+1.
type shares struct {
	lo, extra int
	count     []int
}

func newShares(units, members int) shares {
	return shares{lo: units / members, extra: units % members, count: make([]int, members)}
}

func (s *shares) room(m int) bool {
	return s.count[m] < s.lo || s.count[m] == s.lo && s.extra > 0
}

func (s *shares) take(m int) {
	if s.count[m] >= s.lo {
		s.extra--
	}
	s.count[m]++
}

type assigner struct {
	ms       []Member
	ts       []topo.TaskID
	owner    map[topo.TaskID]int // member index
	active   shares
	perSub   []map[int]int // member -> sub -> active tasks
	replicas map[topo.TaskID][]int
	prior    []map[topo.TaskID]bool // member -> its standbys last generation
	prev     map[topo.TaskID]int    // the member that ran it active last generation
	tagged   bool                   // some member has a tag
}

func newAssigner(ms []Member, ts []topo.TaskID) *assigner {
	a := &assigner{
		ms:       ms,
		ts:       ts,
		owner:    make(map[topo.TaskID]int, len(ts)),
		active:   newShares(len(ts), len(ms)),
		perSub:   make([]map[int]int, len(ms)),
		replicas: map[topo.TaskID][]int{},
		prior:    make([]map[topo.TaskID]bool, len(ms)),
		prev:     map[topo.TaskID]int{},
	}
	for i := range a.perSub {
		a.perSub[i] = map[int]int{}
		a.prior[i] = map[topo.TaskID]bool{}
		for _, t := range ms[i].Info.Standby {
			a.prior[i][t] = true
		}
		a.tagged = a.tagged || hasTags(ms[i].Info.Tags)
	}
	return a
}

// distinctness is m's distinctness (see [Assign]) for a replica of t: the
// number of tag keys for which m differs from t's active member and from
// every replica of t but skip (a member index, or -1).
func (a *assigner) distinctness(m int, t topo.TaskID, skip int) int {
	if !a.tagged {
		return 0
	}
	others := []map[string]string{a.ms[a.owner[t]].Info.Tags}
	for _, r := range a.replicas[t] {
		if r != skip {
			others = append(others, a.ms[r].Info.Tags)
		}
	}
	return distinctness(a.ms[m].Info.Tags, others)
}

func (a *assigner) give(t topo.TaskID, m int) {
	a.owner[t] = m
	a.active.take(m)
	a.perSub[m][t.Sub]++
}

// offsetSum is how caught up m's state of t is; math.MinInt64 if it has
// none. A standby that reported no sum still holds some state: it ranks
// just above none.
func (a *assigner) offsetSum(m int, t topo.TaskID) int64 {
	if s, ok := a.ms[m].Info.OffsetSums[t]; ok {
		return s
	}
	if a.prior[m][t] {
		return math.MinInt64 + 1
	}
	return math.MinInt64
}

// sticky keeps tasks with their previous active owner, each within its share.
func (a *assigner) sticky() {
	claims := make([][]topo.TaskID, len(a.ms))
	had := make([]map[topo.TaskID]bool, len(a.ms))
	for m := range a.ms {
		had[m] = map[topo.TaskID]bool{}
		for _, t := range a.ms[m].Info.Active {
			had[m][t] = true
		}
	}
	for _, t := range a.ts {
		// Two members can claim one task after a zombie or a missed
		// generation; the most caught-up claim wins.
		best := -1
		for m := range a.ms {
			if had[m][t] && (best < 0 || a.offsetSum(m, t) > a.offsetSum(best, t)) {
				best = m
			}
		}
		if best >= 0 {
			claims[best] = append(claims[best], t)
			a.prev[t] = best
		}
	}
	// Keep claims round-robin over sub-topologies, so a member that must
	// give some up keeps a spread of them.
	for m, cs := range claims {
		rank := map[topo.TaskID]int{}
		seen := map[int]int{}
		for _, t := range cs {
			rank[t] = seen[t.Sub]
			seen[t.Sub]++
		}
		slices.SortStableFunc(cs, func(x, y topo.TaskID) int { return rank[x] - rank[y] })
		claims[m] = cs
	}
	kept := make([]int, len(a.ms))
	for m, cs := range claims {
		for kept[m] < len(cs) && a.active.count[m] < a.active.lo {
			a.give(cs[kept[m]], m)
			kept[m]++
		}
	}
	for m, cs := range claims {
		if kept[m] < len(cs) && a.active.room(m) {
			a.give(cs[kept[m]], m)
		}
	}
}

// caughtUp gives unowned tasks to the member with room whose state of them is
// most caught up.
func (a *assigner) caughtUp() {
	for _, t := range a.ts {
		if _, ok := a.owner[t]; ok {
			continue
		}
		best := -1
		for m := range a.ms {
			if !a.active.room(m) || a.offsetSum(m, t) == math.MinInt64 {
				continue
			}
			if best < 0 || a.offsetSum(m, t) > a.offsetSum(best, t) ||
				a.offsetSum(m, t) == a.offsetSum(best, t) && a.active.count[m] < a.active.count[best] {
				best = m
			}
		}
		if best >= 0 {
			a.give(t, best)
		}
	}
}

// fill gives the remaining tasks to the members with room, spreading each
// sub-topology first and the totals second.
func (a *assigner) fill() {
	for _, t := range a.ts {
		if _, ok := a.owner[t]; ok {
			continue
		}
		best := -1
		for m := range a.ms {
			if !a.active.room(m) {
				continue
			}
			if best < 0 || a.perSub[m][t.Sub] < a.perSub[best][t.Sub] ||
				a.perSub[m][t.Sub] == a.perSub[best][t.Sub] && a.active.count[m] < a.active.count[best] {
				best = m
			}
		}
		// The shares add up to len(ts), so someone always has room.
		a.give(t, best)
	}
}

// standbys places n replicas of every task, one round at a time so that
// every task gets its first replica before any gets a second.
func (a *assigner) standbys(n int) {
	if n <= 0 {
		return
	}
	sh := newShares(n*len(a.ts), len(a.ms))
	// better says whether m is a better home than best for a replica of t.
	better := func(m, best int, t topo.TaskID) bool {
		if best < 0 {
			return true
		}
		if rm, rb := sh.room(m), sh.room(best); rm != rb {
			return rm
		}
		if pm, pb := a.prior[m][t], a.prior[best][t]; pm != pb {
			return pm
		}
		if om, ob := a.offsetSum(m, t), a.offsetSum(best, t); om != ob {
			return om > ob
		}
		if sh.count[m] != sh.count[best] {
			return sh.count[m] < sh.count[best]
		}
		// Members after the owner in ring order first: the replicas of
		// evenly spread actives then spread evenly too.
		n, o := len(a.ms), a.owner[t]
		return (m-o+n)%n < (best-o+n)%n
	}
	for range n {
		for _, t := range a.ts {
			best, score := -1, 0
			for m := range a.ms {
				if m == a.owner[t] || slices.Contains(a.replicas[t], m) {
					continue
				}
				if d := a.distinctness(m, t, -1); best < 0 || d > score || d == score && better(m, best, t) {
					best, score = m, d
				}
			}
			// n < len(ms), so an eligible member always exists.
			sh.take(best)
			a.replicas[t] = append(a.replicas[t], best)
		}
	}
	a.evenStandbys(sh.count)
	for _, t := range a.ts {
		slices.Sort(a.replicas[t])
	}
}

// evenStandbys repairs what the greedy placement could not keep even: while
// one member has two standbys more than another, it moves one that the
// other may hold without lowering the task's distinctness, preferring one
// whose state the receiver has and the giver lacks. Each move lowers the sum
// of squared counts, so this ends.
func (a *assigner) evenStandbys(count []int) {
	claim := func(m int, t topo.TaskID) int64 {
		if a.prior[m][t] {
			return math.MaxInt64
		}
		return a.offsetSum(m, t)
	}
	order := make([]int, len(a.ms))
	for moved := true; moved; {
		moved = false
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(x, y int) int { return count[y] - count[x] })
	pairs:
		for _, from := range order {
			for _, to := range slices.Backward(order) {
				if count[from]-count[to] < 2 {
					break
				}
				best, found := topo.TaskID{}, false
				var bestTo, bestFrom int64
				for _, t := range a.ts {
					if !slices.Contains(a.replicas[t], from) || a.owner[t] == to || slices.Contains(a.replicas[t], to) ||
						a.distinctness(to, t, from) < a.distinctness(from, t, from) {
						continue
					}
					ct, cf := claim(to, t), claim(from, t)
					if !found || ct > bestTo || ct == bestTo && cf < bestFrom {
						best, found, bestTo, bestFrom = t, true, ct, cf
					}
				}
				if found {
					i := slices.Index(a.replicas[best], from)
					a.replicas[best][i] = to
					count[from]--
					count[to]++
					moved = true
					break pairs
				}
			}
		}
	}
}
