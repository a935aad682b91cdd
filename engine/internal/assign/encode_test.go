package assign

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
)

func TestMemberRoundTrip(t *testing.T) {
	for _, info := range []MemberInfo{
		{},
		{
			InstanceID: "5b2f0c1e-host-a",
			Addr:       "http://10.0.0.7:8080",
			Active:     []topo.TaskID{tk(0, 1), tk(2, 300)},
			Standby:    []topo.TaskID{tk(1, 0)},
			OffsetSums: map[topo.TaskID]int64{tk(0, 1): 1 << 40, tk(1, 0): 0, tk(3, 3): -2},
		},
		{InstanceID: "a", Tags: map[string]string{"rack": "r1"}},
		{
			InstanceID: "b",
			Active:     []topo.TaskID{tk(0, 0)},
			Tags:       map[string]string{"zone": "eu-1a", "cluster": "k1"},
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
	// Map iteration order varies from one range to the next.
	a.Tags = map[string]string{"a": "1", "b": "2", "c": "3", "d": "4", "e": "5", "f": "6"}
	first := encodeMember(a)
	for range 20 {
		if string(encodeMember(a)) != string(first) {
			t.Fatal("the same tags encode differently")
		}
	}
}

// TestEncodingVersions checks that version 2 is written only with tags, so
// that a build reading only version 1 still reads what has none.
func TestEncodingVersions(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
		want byte
	}{
		{"member without tags", encodeMember(MemberInfo{InstanceID: "a"}), 1},
		{"member with tags", encodeMember(MemberInfo{InstanceID: "a", Tags: map[string]string{"rack": "r1"}}), 2},
		// Tags{"zone": os.Getenv("ZONE")} with the variable unset.
		{"member with only empty tags", encodeMember(MemberInfo{InstanceID: "a", Tags: map[string]string{"zone": ""}}), 1},
		{"assignment with only empty tags", encodeAssignment(wireAssignment{members: []Instance{{MemberID: "m", Tags: map[string]string{"zone": ""}}}}), 1},
		{"assignment without tags", encodeAssignment(wireAssignment{members: []Instance{{MemberID: "m"}, {MemberID: "n"}}}), 1},
		{"assignment with a member with tags", encodeAssignment(wireAssignment{members: []Instance{{MemberID: "m"}, {MemberID: "n", Tags: map[string]string{"rack": "r1"}}}}), 2},
	} {
		if tc.b[0] != tc.want {
			t.Errorf("%s: version %d, want %d", tc.name, tc.b[0], tc.want)
		}
	}
}

// An empty tag is not written: it reads back as no tag at all.
func TestEmptyTagsNotWritten(t *testing.T) {
	got, err := decodeMember(encodeMember(MemberInfo{InstanceID: "a", Tags: map[string]string{"zone": "", "rack": "r1"}}))
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"rack": "r1"}; !reflect.DeepEqual(got.Tags, want) {
		t.Errorf("tags %v, want %v", got.Tags, want)
	}
}

// str encodes s as the encodings do, for blobs built by hand.
func str(s string) []byte { return append([]byte{byte(len(s))}, s...) }

func TestDecodeMember(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    [][]byte
		want MemberInfo
	}{{
		name: "version 1",
		b: [][]byte{
			{1}, str("proc-a"), str("http://a:80"),
			{1, 0, 2},     // active 0_2
			{1, 1, 0},     // standby 1_0
			{1, 1, 0, 14}, // offset sum of 1_0: 7
		},
		want: MemberInfo{
			InstanceID: "proc-a",
			Addr:       "http://a:80",
			Active:     []topo.TaskID{tk(0, 2)},
			Standby:    []topo.TaskID{tk(1, 0)},
			OffsetSums: map[topo.TaskID]int64{tk(1, 0): 7},
		},
	}, {
		name: "version 2",
		b: [][]byte{
			{2}, str("proc-a"), str(""),
			{0}, {0}, {0},
			{2}, str("cluster"), str("k1"), str("zone"), str("eu-1a"),
		},
		want: MemberInfo{InstanceID: "proc-a", Tags: map[string]string{"cluster": "k1", "zone": "eu-1a"}},
	}, {
		name: "version 2 without tags",
		b:    [][]byte{{2}, str("proc-a"), str(""), {0}, {0}, {0}, {0}},
		want: MemberInfo{InstanceID: "proc-a"},
	}} {
		got, err := decodeMember(slices.Concat(tc.b...))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: decoded %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestAssignmentRoundTrip(t *testing.T) {
	w := wireAssignment{
		generation: 42,
		self:       1,
		members: []Instance{
			{MemberID: "m-a", InstanceID: "a", Addr: "http://a:80", Tags: map[string]string{"rack": "r1", "zone": "z"}},
			{MemberID: "m-b", InstanceID: "b"},
			{MemberID: "m-c", InstanceID: "c", Addr: "http://c:80", Tags: map[string]string{"rack": "r2"}},
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

func TestDecodeAssignmentVersion1(t *testing.T) {
	b := slices.Concat(
		[]byte{1},
		[]byte{14}, // generation 7
		[]byte{1},  // self: m-b
		[]byte{2}, str("m-a"), str("a"), str("http://a:80"), str("m-b"), str("b"), str(""),
		[]byte{2},
		[]byte{0, 0, 0, 1, 1}, // 0_0 on m-a, standby on m-b
		[]byte{0, 1, 1, 0},    // 0_1 on m-b
	)
	got, err := decodeAssignment(b)
	if err != nil {
		t.Fatal(err)
	}
	a, bi := Instance{MemberID: "m-a", InstanceID: "a", Addr: "http://a:80"}, Instance{MemberID: "m-b", InstanceID: "b"}
	want := Assignment{
		Generation: 7,
		Self:       bi,
		Active:     []topo.TaskID{tk(0, 1)},
		Standby:    []topo.TaskID{tk(0, 0)},
		Members:    []Instance{a, bi},
		Tasks: map[topo.TaskID]Placement{
			tk(0, 0): {Active: a, Standbys: []Instance{bi}},
			tk(0, 1): {Active: bi},
		},
		Partitions: map[int]int32{0: 2},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("decoded\n%+v\nwant\n%+v", got, want)
	}
}

func TestDecodeVersionMismatch(t *testing.T) {
	for _, v := range []byte{0, memberVersion + 1} {
		m := encodeMember(MemberInfo{InstanceID: "a"})
		m[0] = v
		if _, err := decodeMember(m); !errors.Is(err, ErrVersion) {
			t.Errorf("member version %d: err = %v, want ErrVersion", v, err)
		}
	}
	for _, v := range []byte{0, assignmentVersion + 1} {
		a := encodeAssignment(wireAssignment{members: []Instance{{MemberID: "m"}}})
		a[0] = v
		if _, err := decodeAssignment(a); !errors.Is(err, ErrVersion) {
			t.Errorf("assignment version %d: err = %v, want ErrVersion", v, err)
		}
	}
}

func TestDecodeCorrupt(t *testing.T) {
	m := encodeMember(MemberInfo{InstanceID: "abc", Active: []topo.TaskID{tk(0, 1)}, OffsetSums: map[topo.TaskID]int64{tk(0, 1): 9}, Tags: map[string]string{"rack": "r1"}})
	for i := range len(m) {
		if _, err := decodeMember(m[:i]); err == nil {
			t.Errorf("member truncated to %d bytes decoded", i)
		}
	}
	if _, err := decodeMember(append(m, 0)); err == nil {
		t.Error("member with a trailing byte decoded")
	}
	dup := slices.Concat([]byte{2}, str("a"), str(""), []byte{0, 0, 0, 2}, str("rack"), str("r1"), str("rack"), str("r2"))
	if _, err := decodeMember(dup); err == nil || !strings.Contains(err.Error(), `tag "rack" appears twice`) {
		t.Errorf("member with a tag twice: err = %v", err)
	}
	w := wireAssignment{
		members: []Instance{{MemberID: "m", Tags: map[string]string{"rack": "r1"}}},
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
	f.Add(encodeMember(MemberInfo{InstanceID: "a", Active: []topo.TaskID{tk(0, 1)}}))
	f.Add(encodeAssignment(wireAssignment{members: []Instance{{MemberID: "m"}}, tasks: []topo.TaskID{tk(0, 0)}, active: map[topo.TaskID]int{}}))
	f.Add(encodeMember(MemberInfo{InstanceID: "a", Tags: map[string]string{"rack": "r1"}}))
	f.Add(encodeAssignment(wireAssignment{members: []Instance{{MemberID: "m", Tags: map[string]string{"rack": "r1"}}}, tasks: []topo.TaskID{tk(0, 0)}, active: map[topo.TaskID]int{}}))
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
