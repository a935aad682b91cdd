package runtime

import (
	"maps"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
)

func TestPositionMarkerRoundTrip(t *testing.T) {
	pos := map[topicPartition]int64{{"events", 0}: 12, {"events", 3}: 0, {"catalog.public.x", 1}: 1 << 40}
	rec := &kgo.Record{Headers: []kgo.RecordHeader{{Key: PositionHeader, Value: encodePositions(7, pos)}}}
	w, got, ok := markerOf(rec)
	if !ok || w != 7 || !maps.Equal(got, pos) {
		t.Fatalf("markerOf = %d %v %v, want 7 %v", w, got, ok, pos)
	}
	// A record with a key or a value is data whatever its headers; a
	// malformed marker is no marker.
	if _, _, ok := markerOf(&kgo.Record{Key: []byte("k"), Headers: rec.Headers}); ok {
		t.Error("a record with a key was taken for a marker")
	}
	bad := encodePositions(7, pos)
	if _, _, ok := markerOf(&kgo.Record{Headers: []kgo.RecordHeader{{Key: PositionHeader, Value: bad[:len(bad)-1]}}}); ok {
		t.Error("a truncated marker was taken in")
	}
}

func TestCommitMetadataRoundTrip(t *testing.T) {
	for _, c := range []struct {
		ms      int64
		derived string
	}{{42, ""}, {42, "events/0/12,events/1/7"}, {topo.NoTime, "events/2/3"}, {-5, ""}} {
		meta := encodeStreamTime(c.ms, c.derived)
		ms, derived, ok := decodeMeta(&meta)
		if ok != (c.ms != topo.NoTime) || ok && ms != c.ms || derived != c.derived {
			t.Errorf("%q: decoded %d %q %v, want %d %q", meta, ms, derived, ok, c.ms, c.derived)
		}
	}
	// Kafka bounds the metadata: derived positions that would not fit are
	// left out (a task learns them again from the next markers), the stream
	// time never.
	long := strings.Repeat("events/0/12,", 500)
	meta := encodeStreamTime(42, long)
	if ms, derived, ok := decodeMeta(&meta); !ok || ms != 42 || derived != "" || len(meta) > maxMetadata {
		t.Errorf("an overlong metadata: %d bytes, decoded %d %q %v", len(meta), ms, derived, ok)
	}
}

func TestOriginSlot(t *testing.T) {
	s := &originSlot{floor: -1, writers: []int64{-1, -1, -1}}
	s.writers[0], s.writers[2] = 10, 4
	if v := s.value(); v != -1 {
		t.Errorf("with a writer unheard: %d, want -1", v)
	}
	s.writers[1] = 6
	if v := s.value(); v != 4 {
		t.Errorf("with every writer heard: %d, want the least, 4", v)
	}
	s.floor = 9 // restored from a commit
	if v := s.value(); v != 9 {
		t.Errorf("under a floor of 9: %d", v)
	}
}
