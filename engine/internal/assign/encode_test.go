package assign

import (
	"errors"
	"reflect"
	"testing"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
)

func TestMemberRoundTrip(t *testing.T) {
	for _, info := range []MemberInfo{
		{},
		{
			ProcessID:  "5b2f0c1e-host-a",
			Addr:       "http://10.0.0.7:8080",
			Active:     []topo.TaskID{tk(0, 1), tk(2, 300)},
			Standby:    []topo.TaskID{tk(1, 0)},
			OffsetSums: map[topo.TaskID]int64{tk(0, 1): 1 << 40, tk(1, 0): 0, tk(3, 3): -2},
		},
	} {
		got, err := decodeMember(encodeMember(info))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, info) {
			t.Errorf("round trip gave %+v, want %+v", got, info)
		}
	}
}

func TestMemberEncodingIsDeterministic(t *testing.T) {
	a := MemberInfo{Active: []topo.TaskID{tk(1, 0), tk(0, 2), tk(0, 1)}, OffsetSums: map[topo.TaskID]int64{tk(0, 1): 1, tk(0, 2): 2, tk(1, 0): 3}}
	b := MemberInfo{Active: []topo.TaskID{tk(0, 1), tk(0, 2), tk(1, 0)}, OffsetSums: map[topo.TaskID]int64{tk(1, 0): 3, tk(0, 2): 2, tk(0, 1): 1}}
	if string(encodeMember(a)) != string(encodeMember(b)) {
		t.Error("the same member info encodes differently")
	}
}

func TestAssignmentRoundTrip(t *testing.T) {
	w := wireAssignment{
		generation: 42,
		self:       1,
		members: []Instance{
			{MemberID: "m-a", ProcessID: "a", Addr: "http://a:80"},
			{MemberID: "m-b", ProcessID: "b"},
			{MemberID: "m-c", ProcessID: "c", Addr: "http://c:80"},
		},
		tasks:   []topo.TaskID{tk(0, 0), tk(0, 1), tk(1, 0)},
		active:  map[topo.TaskID]int{tk(0, 0): 0, tk(0, 1): 1, tk(1, 0): 2},
		standby: map[topo.TaskID][]int{tk(0, 0): {1, 2}, tk(1, 0): {0}},
	}
	got, err := decodeAssignment(encodeAssignment(w))
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := w.members[0], w.members[1], w.members[2]
	want := Assignment{
		Generation: 42,
		Self:       b,
		Active:     []topo.TaskID{tk(0, 1)},
		Standby:    []topo.TaskID{tk(0, 0)},
		Members:    w.members,
		Tasks: map[topo.TaskID]Placement{
			tk(0, 0): {Active: a, Standbys: []Instance{b, c}},
			tk(0, 1): {Active: b},
			tk(1, 0): {Active: c, Standbys: []Instance{a}},
		},
		Partitions: map[int]int32{0: 2, 1: 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("round trip gave\n%+v\nwant\n%+v", got, want)
	}
}

func TestDecodeVersionMismatch(t *testing.T) {
	m := encodeMember(MemberInfo{ProcessID: "a"})
	m[0] = memberVersion + 1
	if _, err := decodeMember(m); !errors.Is(err, ErrVersion) {
		t.Errorf("member: err = %v, want ErrVersion", err)
	}
	a := encodeAssignment(wireAssignment{members: []Instance{{MemberID: "m"}}})
	a[0] = assignmentVersion + 1
	if _, err := decodeAssignment(a); !errors.Is(err, ErrVersion) {
		t.Errorf("assignment: err = %v, want ErrVersion", err)
	}
}

func TestDecodeCorrupt(t *testing.T) {
	m := encodeMember(MemberInfo{ProcessID: "abc", Active: []topo.TaskID{tk(0, 1)}, OffsetSums: map[topo.TaskID]int64{tk(0, 1): 9}})
	for i := range len(m) {
		if _, err := decodeMember(m[:i]); err == nil {
			t.Errorf("member truncated to %d bytes decoded", i)
		}
	}
	if _, err := decodeMember(append(m, 0)); err == nil {
		t.Error("member with a trailing byte decoded")
	}
	w := wireAssignment{
		members: []Instance{{MemberID: "m"}},
		tasks:   []topo.TaskID{tk(0, 0)},
		active:  map[topo.TaskID]int{tk(0, 0): 0},
	}
	a := encodeAssignment(w)
	for i := range len(a) {
		if _, err := decodeAssignment(a[:i]); err == nil {
			t.Errorf("assignment truncated to %d bytes decoded", i)
		}
	}
	w.active[tk(0, 0)] = 1
	if _, err := decodeAssignment(encodeAssignment(w)); err == nil {
		t.Error("assignment with an out-of-range member index decoded")
	}
	w.active[tk(0, 0)] = 0
	w.tasks = []topo.TaskID{tk(0, 1)}
	if _, err := decodeAssignment(encodeAssignment(w)); err == nil {
		t.Error("assignment with a gap in a sub-topology's tasks decoded")
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(encodeMember(MemberInfo{ProcessID: "a", Active: []topo.TaskID{tk(0, 1)}}))
	f.Add(encodeAssignment(wireAssignment{members: []Instance{{MemberID: "m"}}, tasks: []topo.TaskID{tk(0, 0)}, active: map[topo.TaskID]int{}}))
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		if info, err := decodeMember(b); err == nil {
			if _, err := decodeMember(encodeMember(info)); err != nil {
				t.Errorf("re-encoded member does not decode: %v", err)
			}
		}
		_, _ = decodeAssignment(b)
	})
}
