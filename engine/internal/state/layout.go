package state

import (
	"bytes"
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
)

// Layout says how a store's keys are laid out in pebble. The zero value is
// the plain layout: each key after its store partition's prefix, in key
// order.
//
// A window or session store's keys end with times (a window's start; a
// session's end, then its start). Laid out plainly, one record key's windows
// sit together, but the windows being updated — those of the last minutes —
// are spread over the whole key space, so every flush of new windows
// overlaps every table of the store and pebble rewrites all of it again and
// again; a store of 100,000 keys in hopping windows spent a third of its CPU
// compacting. Segmented, the keys are filed under the time segment their
// time falls in (as Kafka Streams' segmented window stores do), then by key:
// new windows go to the newest segments, older segments' tables are never
// rewritten, and one record key's windows are still together within a
// segment.
type Layout struct {
	// Segment is the length of a time segment; 0: the plain layout.
	Segment time.Duration
	// TimeAt is where a key's time (8 bytes, big-endian, Unix ms) begins,
	// counted from the key's end: 8 for a window's start, 16 for a
	// session's end. It is also the length of the suffix after the record
	// key.
	TimeAt int
}

// LayoutOf is the layout of a store as the topology declares it (nil: a
// store it does not have, plain).
func LayoutOf(spec *topo.StoreSpec) Layout {
	if spec == nil || spec.Segment <= 0 || spec.InMemory || spec.Global {
		return Layout{}
	}
	switch spec.Kind {
	case topo.WindowStore:
		return Layout{Segment: spec.Segment, TimeAt: 8}
	case topo.SessionStore:
		return Layout{Segment: spec.Segment, TimeAt: 16}
	}
	return Layout{}
}

// segmented reports whether the layout files keys by segment.
func (l Layout) segmented() bool { return l.Segment > 0 && l.TimeAt >= 8 }

// interval is the segment length in ms (at least 1).
func (l Layout) interval() uint64 { return uint64(max(l.Segment.Milliseconds(), 1)) }

// segPrefix is the prefix of every key of a segmented store partition:
// its name and partition, then the segment length, so that keys filed
// under another length are never read as this one's (openLayouts wipes
// them).
func segPrefix(store string, partition int32, interval uint64) []byte {
	return binary.BigEndian.AppendUint64(segDataPrefix(store, partition, 8), interval)
}

// segOf is the segment of a key's time, as 8 big-endian bytes: the time
// read as unsigned, so that one record key's segments ascend with its keys.
// A key too short to hold a time is filed under segment 0.
func (l Layout) segOf(key []byte) uint64 {
	if len(key) < l.TimeAt {
		return 0
	}
	return binary.BigEndian.Uint64(key[len(key)-l.TimeAt:]) / l.interval()
}

// appendPhysical appends the part of key's pebble key after the
// partition's prefix: its segment, then the key.
func (l Layout) appendPhysical(dst, key []byte) []byte {
	return append(binary.BigEndian.AppendUint64(dst, l.segOf(key)), key...)
}

// openLayouts wipes the store partitions held in a layout other than the
// one Options.Layout gives their store now (state written before stores
// were segmented, or with another segment length): their checkpoints then
// go too, and the runtime restores them from their changelogs.
func (db *DB) openLayouts() error {
	parts, err := db.Stores()
	if err != nil {
		return err
	}
	for _, sp := range parts {
		stale, err := db.staleLayout(sp.Store, sp.Partition)
		if err != nil {
			return err
		}
		if stale {
			db.opts.Logger.Warn("engine: state: the local layout of a store changed: its local state is deleted, to be restored from its changelog (a store without one starts empty)",
				"store", sp.Store, "partition", sp.Partition)
			if err := db.Wipe(sp.Store, sp.Partition); err != nil {
				return err
			}
		}
	}
	return nil
}

// staleLayout reports whether a store partition holds keys in a layout
// other than its store's.
func (db *DB) staleLayout(store string, partition int32) (bool, error) {
	l := db.opts.Layout(store)
	plain, seg := dataPrefix(store, partition), segDataPrefix(store, partition, 0)
	has := func(lo, hi []byte) (bool, error) {
		it, err := db.pdb.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		if err != nil {
			return false, err
		}
		ok := it.First()
		return ok, errors.Join(it.Error(), it.Close())
	}
	if !l.segmented() {
		return has(seg, topo.PrefixEnd(seg))
	}
	if stale, err := has(plain, topo.PrefixEnd(plain)); stale || err != nil {
		return stale, err
	}
	// Keys under another segment length sort before or after this one's.
	want := segPrefix(store, partition, l.interval())
	if stale, err := has(seg, want); stale || err != nil {
		return stale, err
	}
	return has(topo.PrefixEnd(want), topo.PrefixEnd(seg))
}

// rangeSegmented iterates [lo, hi) of a segmented store partition in key
// order: the keys of each segment holding some, merged.
func (s *store) rangeSegmented(lo, hi []byte) iter.Seq2[topo.Entry, error] {
	return func(yield func(topo.Entry, error) bool) {
		segs, err := s.segments(0, ^uint64(0))
		if err != nil {
			yield(topo.Entry{}, err)
			return
		}
		h := &segHeap{prefix: len(s.prefix) + 8}
		defer func() {
			for _, it := range h.its {
				s.closeIter(it.it, it.p)
			}
		}()
		for _, seg := range segs {
			lower := s.segKey(seg, lo)
			upper := s.segEnd(seg, hi)
			it, p, err := s.openIter(lower, upper)
			if err != nil {
				yield(topo.Entry{}, err)
				return
			}
			if it == nil {
				continue
			}
			si := segIter{it: it, p: p}
			if it.First() {
				h.its = append(h.its, si)
			} else {
				err := it.Error()
				s.closeIter(it, p)
				if err != nil {
					yield(topo.Entry{}, fmt.Errorf("engine: state: range over %q: %w", s.name, err))
					return
				}
			}
		}
		heap.Init(h)
		for h.Len() > 0 {
			it := h.its[0].it
			v, err := it.ValueAndErr()
			var e topo.Entry
			if err == nil {
				e, err = decodeEntry(it.Key()[h.prefix:], v)
			}
			if err != nil {
				yield(topo.Entry{}, fmt.Errorf("engine: state: range over %q: %w", s.name, err))
				return
			}
			if !yield(e, nil) {
				return
			}
			if it.Next() {
				heap.Fix(h, 0)
				continue
			}
			if err := it.Error(); err != nil {
				yield(topo.Entry{}, fmt.Errorf("engine: state: range over %q: %w", s.name, err))
				return
			}
			done := heap.Pop(h).(segIter)
			s.closeIter(done.it, done.p)
		}
	}
}

// RangeKey iterates the keys in [lo, hi) of one record key: lo is a key
// of it (the record key, then TimeAt bytes of times), hi another key of
// it or the end of its keys; keys of other record keys that sort between
// (longer ones that begin with it) are left out. On a segmented store it
// reads only the segments from lo's onward (to hi's), in one pass: one
// record key's keys ascend with their segments.
func (s *store) RangeKey(lo, hi []byte, suffix int) iter.Seq2[topo.Entry, error] {
	if !s.layout.segmented() || len(lo) < suffix || suffix != s.layout.TimeAt {
		return topo.FilterKey(s.Range(lo, hi), lo, suffix)
	}
	return func(yield func(topo.Entry, error) bool) {
		rk := lo[:len(lo)-suffix]
		first, last := s.layout.segOf(lo), ^uint64(0)
		if hi != nil && len(hi) >= len(lo) && bytes.HasPrefix(hi, rk) {
			last = s.layout.segOf(hi[:len(lo)])
		}
		it, p, err := s.openIter(s.segKey(first, nil), s.segEnd(last, nil))
		if err != nil {
			yield(topo.Entry{}, err)
			return
		}
		if it == nil {
			return
		}
		defer s.closeIter(it, p)
		n := len(s.prefix) + 8
		for ok := it.SeekGE(s.seekKey(first, lo)); ok; {
			k := it.Key()
			seg := binary.BigEndian.Uint64(k[len(s.prefix):n])
			key := k[n:]
			if bytes.Compare(key, lo) < 0 {
				// A segment's keys below lo: on to lo in it.
				ok = it.SeekGE(s.seekKey(seg, lo))
				continue
			}
			if hi != nil && bytes.Compare(key, hi) >= 0 || !bytes.HasPrefix(key, rk) {
				// Past the record key's keys in this segment: the next.
				if seg == last {
					break
				}
				ok = it.SeekGE(s.seekKey(seg+1, lo))
				continue
			}
			if len(key) == len(lo) {
				v, err := it.ValueAndErr()
				var e topo.Entry
				if err == nil {
					e, err = decodeEntry(key, v)
				}
				if err != nil {
					yield(topo.Entry{}, fmt.Errorf("engine: state: range over %q: %w", s.name, err))
					return
				}
				if !yield(e, nil) {
					return
				}
			}
			ok = it.Next()
		}
		if err := it.Error(); err != nil {
			yield(topo.Entry{}, fmt.Errorf("engine: state: range over %q: %w", s.name, err))
		}
	}
}

// segments lists the segments in [first, last] that hold keys, one seek
// each.
func (s *store) segments(first, last uint64) ([]uint64, error) {
	it, p, err := s.openIter(s.segKey(first, nil), s.segEnd(last, nil))
	if err != nil || it == nil {
		return nil, err
	}
	defer s.closeIter(it, p)
	var segs []uint64
	for ok := it.First(); ok; {
		seg := binary.BigEndian.Uint64(it.Key()[len(s.prefix):])
		segs = append(segs, seg)
		if seg == last {
			break
		}
		ok = it.SeekGE(s.seekKey(seg+1, nil))
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("engine: state: range over %q: %w", s.name, err)
	}
	return segs, nil
}

// segKey is the pebble key of key in segment seg (key nil: the segment's
// start), freshly allocated: pebble keeps bounds for an iterator's life.
func (s *store) segKey(seg uint64, key []byte) []byte {
	k := make([]byte, 0, len(s.prefix)+8+len(key))
	return append(binary.BigEndian.AppendUint64(append(k, s.prefix...), seg), key...)
}

// seekKey is segKey in s.scratch, for a seek: pebble does not keep it.
func (s *store) seekKey(seg uint64, key []byte) []byte {
	s.scratch = append(binary.BigEndian.AppendUint64(append(s.scratch[:0], s.prefix...), seg), key...)
	return s.scratch
}

// segEnd is the pebble key bounding segment seg's keys below hi (nil: the
// whole segment).
func (s *store) segEnd(seg uint64, hi []byte) []byte {
	if hi != nil {
		return s.segKey(seg, hi)
	}
	if seg == ^uint64(0) {
		return bytes.Clone(s.end)
	}
	return s.segKey(seg+1, nil)
}

// segIter is one segment's iterator in a merge.
type segIter struct {
	it *pebble.Iterator
	p  *pending
}

// segHeap orders segments' iterators by their current keys (after the
// prefix and segment).
type segHeap struct {
	prefix int
	its    []segIter
}

func (h *segHeap) Len() int { return len(h.its) }
func (h *segHeap) Less(i, j int) bool {
	return bytes.Compare(h.its[i].it.Key()[h.prefix:], h.its[j].it.Key()[h.prefix:]) < 0
}
func (h *segHeap) Swap(i, j int) { h.its[i], h.its[j] = h.its[j], h.its[i] }
func (h *segHeap) Push(x any)    { h.its = append(h.its, x.(segIter)) }
func (h *segHeap) Pop() any {
	x := h.its[len(h.its)-1]
	h.its = h.its[:len(h.its)-1]
	return x
}
