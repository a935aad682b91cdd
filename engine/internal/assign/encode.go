package assign

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
)

// The encodings of the UserData this balancer puts into Kafka's consumer
// member metadata and member assignment. Both start with a version byte.
//
// Member metadata, version 2:
//
//	version    byte (2)
//	process id string
//	addr       string
//	active     uvarint n, n tasks
//	standby    uvarint n, n tasks
//	offset sums uvarint n, n × (task, varint sum)
//	tags       uvarint n, n × (key string, value string)
//
// Assignment, version 2:
//
//	version    byte (2)
//	generation varint
//	self       uvarint: index into members
//	members    uvarint n, n × (member id string, process id string, addr string,
//	                           uvarint k, k × (tag key string, tag value string))
//	tasks      uvarint n, n × (task, uvarint active member index,
//	                           uvarint k, k × uvarint standby member index)
//
// A string is a uvarint length and its bytes; a task is uvarint sub-topology
// and uvarint partition. Lists are sorted (tags by key), so the same content
// always encodes to the same bytes (Kafka compares member metadata to decide
// whether a rejoin changes anything).
//
// Version 1 of both is version 2 without tags. Both are read, and version 1
// is still written when there are no tags (member metadata: the member has
// none; assignment: no member has any), so that members of a build that reads
// only version 1 keep working with this one in a group without tags, as
// during a rolling upgrade.
const (
	memberVersion     byte = 2
	assignmentVersion byte = 2
)

// ErrVersion is wrapped by decoding errors for an encoding version this build
// does not read.
var ErrVersion = errors.New("assign: unsupported encoding version")

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendTask(b []byte, t topo.TaskID) []byte {
	b = binary.AppendUvarint(b, uint64(t.Sub))
	return binary.AppendUvarint(b, uint64(t.Partition))
}

// appendTags writes the tags that have a value: an empty one is the same as
// none (and a member whose tags are all empty is written as version 1, which
// members of an older version still read).
func appendTags(b []byte, tags map[string]string) []byte {
	var keys []string
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		if tags[k] != "" {
			keys = append(keys, k)
		}
	}
	b = binary.AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		b = appendString(b, k)
		b = appendString(b, tags[k])
	}
	return b
}

func appendTasks(b []byte, ts []topo.TaskID) []byte {
	ts = slices.SortedFunc(slices.Values(ts), compareTasks)
	ts = slices.Compact(ts)
	b = binary.AppendUvarint(b, uint64(len(ts)))
	for _, t := range ts {
		b = appendTask(b, t)
	}
	return b
}

func encodeMember(info MemberInfo) []byte {
	version := byte(1)
	if hasTags(info.Tags) {
		version = memberVersion
	}
	b := []byte{version}
	b = appendString(b, info.InstanceID)
	b = appendString(b, info.Addr)
	b = appendTasks(b, info.Active)
	b = appendTasks(b, info.Standby)
	sums := make([]topo.TaskID, 0, len(info.OffsetSums))
	for t := range info.OffsetSums {
		sums = append(sums, t)
	}
	slices.SortFunc(sums, compareTasks)
	b = binary.AppendUvarint(b, uint64(len(sums)))
	for _, t := range sums {
		b = appendTask(b, t)
		b = binary.AppendVarint(b, info.OffsetSums[t])
	}
	if version >= 2 {
		b = appendTags(b, info.Tags)
	}
	return b
}

func decodeMember(b []byte) (MemberInfo, error) {
	var info MemberInfo
	r := reader{b: b, what: "member metadata"}
	version, err := r.version(memberVersion)
	if err != nil {
		return info, err
	}
	info.InstanceID = r.string()
	info.Addr = r.string()
	info.Active = r.tasks()
	info.Standby = r.tasks()
	if n := r.count(2); n > 0 {
		info.OffsetSums = make(map[topo.TaskID]int64, n)
		for range n {
			t := r.task()
			info.OffsetSums[t] = r.varint()
		}
	}
	if version >= 2 {
		info.Tags = r.tags()
	}
	return info, r.done()
}

// wireAssignment is what the leader sends one member.
type wireAssignment struct {
	generation int32
	self       int
	members    []Instance
	tasks      []topo.TaskID // sorted
	active     map[topo.TaskID]int
	standby    map[topo.TaskID][]int
}

func encodeAssignment(w wireAssignment) []byte {
	version := byte(1)
	if slices.ContainsFunc(w.members, func(m Instance) bool { return hasTags(m.Tags) }) {
		version = assignmentVersion
	}
	b := []byte{version}
	b = binary.AppendVarint(b, int64(w.generation))
	b = binary.AppendUvarint(b, uint64(w.self))
	b = binary.AppendUvarint(b, uint64(len(w.members)))
	for _, m := range w.members {
		b = appendString(b, m.MemberID)
		b = appendString(b, m.InstanceID)
		b = appendString(b, m.Addr)
		if version >= 2 {
			b = appendTags(b, m.Tags)
		}
	}
	b = binary.AppendUvarint(b, uint64(len(w.tasks)))
	for _, t := range w.tasks {
		b = appendTask(b, t)
		b = binary.AppendUvarint(b, uint64(w.active[t]))
		b = binary.AppendUvarint(b, uint64(len(w.standby[t])))
		for _, m := range w.standby[t] {
			b = binary.AppendUvarint(b, uint64(m))
		}
	}
	return b
}

func decodeAssignment(b []byte) (Assignment, error) {
	r := reader{b: b, what: "assignment"}
	version, err := r.version(assignmentVersion)
	if err != nil {
		return Assignment{}, err
	}
	gen := r.varint()
	if gen < math.MinInt32 || gen > math.MaxInt32 {
		r.fail("generation %d is out of range", gen)
	}
	self := r.uvarint()
	minSize := 3
	if version >= 2 {
		minSize = 4
	}
	members := make([]Instance, r.count(minSize))
	for i := range members {
		members[i] = Instance{MemberID: r.string(), InstanceID: r.string(), Addr: r.string()}
		if version >= 2 {
			members[i].Tags = r.tags()
		}
	}
	member := func() Instance {
		i := r.uvarint()
		if i >= uint64(len(members)) {
			r.fail("member index %d is out of range (%d members)", i, len(members))
			return Instance{}
		}
		return members[i]
	}
	a := Assignment{
		Generation: int32(gen),
		Members:    members,
		Tasks:      map[topo.TaskID]Placement{},
		Partitions: map[int]int32{},
	}
	if self >= uint64(len(members)) {
		r.fail("own member index %d is out of range (%d members)", self, len(members))
	} else {
		a.Self = members[self]
	}
	for range r.count(3) {
		t := r.task()
		if _, dup := a.Tasks[t]; dup {
			r.fail("task %s appears twice", t)
		}
		pl := Placement{Active: member()}
		if k := r.count(1); k > 0 {
			pl.Standbys = make([]Instance, k)
			for i := range pl.Standbys {
				pl.Standbys[i] = member()
			}
		}
		a.Tasks[t] = pl
		a.Partitions[t.Sub]++
		if r.err == nil && pl.Active.MemberID == a.Self.MemberID {
			a.Active = append(a.Active, t)
		}
		for _, s := range pl.Standbys {
			if r.err == nil && s.MemberID == a.Self.MemberID {
				a.Standby = append(a.Standby, t)
			}
		}
	}
	if err := r.done(); err != nil {
		return Assignment{}, err
	}
	for sub, n := range a.Partitions {
		for p := range n {
			if _, ok := a.Tasks[topo.TaskID{Sub: sub, Partition: p}]; !ok {
				return Assignment{}, fmt.Errorf("assign: corrupt assignment: sub-topology %d has %d tasks but no task for partition %d", sub, n, p)
			}
		}
	}
	slices.SortFunc(a.Active, compareTasks)
	slices.SortFunc(a.Standby, compareTasks)
	return a, nil
}

// reader decodes the encodings above, remembering the first error.
type reader struct {
	b    []byte
	what string
	err  error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("assign: corrupt %s: %s", r.what, fmt.Sprintf(format, args...))
	}
}

// version reads the version byte, which must be from 1 to latest.
func (r *reader) version(latest byte) (byte, error) {
	if len(r.b) == 0 {
		return 0, fmt.Errorf("assign: %s is empty; is the member running an Oxbow balancer?", r.what)
	}
	got := r.b[0]
	if got < 1 || got > latest {
		return 0, fmt.Errorf("%w: %s version %d, this build reads versions 1 to %d", ErrVersion, r.what, got, latest)
	}
	r.b = r.b[1:]
	return got, nil
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("truncated or overlong number")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail("truncated or overlong number")
		return 0
	}
	r.b = r.b[n:]
	return v
}

// count reads a list length, each element taking at least minSize bytes, so
// that garbage cannot make us allocate more than the input could hold.
func (r *reader) count(minSize int) int {
	n := r.uvarint()
	if n > uint64(len(r.b)/minSize) {
		r.fail("list of %d entries in %d bytes", n, len(r.b))
		return 0
	}
	return int(n)
}

func (r *reader) string() string {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.fail("string of %d bytes in %d bytes", n, len(r.b))
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

func (r *reader) task() topo.TaskID {
	sub, p := r.uvarint(), r.uvarint()
	if sub > math.MaxInt32 || p > math.MaxInt32 {
		r.fail("task %d_%d is out of range", sub, p)
		return topo.TaskID{}
	}
	return topo.TaskID{Sub: int(sub), Partition: int32(p)}
}

func (r *reader) tasks() []topo.TaskID {
	n := r.count(2)
	if n == 0 {
		return nil
	}
	ts := make([]topo.TaskID, n)
	for i := range ts {
		ts[i] = r.task()
	}
	return ts
}

// tags reads a tag list; nil if it is empty.
func (r *reader) tags() map[string]string {
	n := r.count(2)
	if n == 0 {
		return nil
	}
	tags := make(map[string]string, n)
	for range n {
		k, v := r.string(), r.string()
		if _, dup := tags[k]; dup {
			r.fail("tag %q appears twice", k)
		}
		tags[k] = v
	}
	return tags
}

func (r *reader) done() error {
	if r.err == nil && len(r.b) > 0 {
		r.fail("%d trailing bytes", len(r.b))
	}
	return r.err
}

// DecodeMember reads the MemberInfo a member of an engine's group sends
// as its subscription's UserData (what a DescribeGroups answer shows of
// it).
func DecodeMember(userData []byte) (MemberInfo, error) { return decodeMember(userData) }
