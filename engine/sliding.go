package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
)

// SlidingWindows are Kafka Streams' sliding windows: windows of the given
// time difference placed by the records, not the epoch. Two records are in
// a window together when their timestamps differ by at most the time
// difference, and each distinct set of records so related has one window:
// a record at t opens the window [t-d, t] that ends with it and, when later
// records follow within d, the window [t+1, t+1+d] that starts just after
// it. Unlike the other windows, a sliding window holds both its ends: its
// [Window] has End = Start + d, and a record at End is in it. Add grace with
// [TimeWindows.Grace]; a record whose windows have all closed is dropped.
//
// A record earlier than d after the epoch would open a window starting
// before it: such records share the window [0, d] instead, as in Kafka
// Streams.
//
// The aggregation writes each window's store without the record cache (it
// reads ranges of the store, which the cache cannot serve in order), so
// every update of a window goes downstream; use [EmitFinal] for one result
// per window.
func SlidingWindows(timeDifference time.Duration) TimeWindows {
	return TimeWindows{size: timeDifference, sliding: true}
}

// slidingWin is a window of the key being processed, read from the store.
type slidingWin struct {
	start int64
	agg   any
	ts    int64 // the latest record in the window
}

// slidingProc is the processor of a sliding-window aggregation, a port of
// the semantics of Kafka Streams' KStreamSlidingWindowAggregate: for a
// record at t it updates every existing window holding t, creates the
// record's own window ending at t (seeded with the windows before it), the
// window starting just after the previous record when t falls in it, and
// the window starting just after t when later records exist.
type slidingProc struct {
	wb   windowBase
	diff int64
	add  aggFunc
	wins []slidingWin
}

func newSlidingProc(wb windowBase, diff time.Duration, add aggFunc) topo.Processor {
	p := &slidingProc{wb: wb, diff: diff.Milliseconds(), add: add}
	return &fproc{init: p.wb.open, fn: p.process}
}

func (p *slidingProc) process(c *topo.Context, r topo.Record) error {
	if r.Key == nil || r.Value == nil {
		c.Skip("record without a key or value in an aggregation")
		return nil
	}
	now := c.StreamTime()
	t := r.Timestamp.UnixMilli()
	d := p.diff
	closeAt := now.UnixMilli() - p.wb.grace.Milliseconds()
	if t+1+d <= closeAt {
		// Even the window starting after the record has closed.
		c.Skip("record for a closed window")
		if err := c.Late("record for closed windows only"); err != nil {
			return err
		}
		return p.wb.advance(c, closeAt-1, now)
	}
	kb, err := p.wb.kc.Encode(p.wb.wkey(r.Key, Window{}))
	if err != nil {
		return p.wb.st.err("key", nil, true, err)
	}
	kb = kb[:len(kb)-8] // the inner key: a windowed key ends with its start
	u := slidingUpdate{p: p, c: c, r: r, kb: kb, t: t, closeAt: closeAt}
	if t < d {
		err = u.early()
	} else {
		err = u.inOrder()
	}
	if err != nil {
		return err
	}
	if u.applied == 0 {
		if err := c.Late("record for closed windows only"); err != nil {
			return err
		}
	}
	// A sliding window holds its end: it has closed once end < now-grace.
	return p.wb.advance(c, closeAt-1, now)
}

// fetch reads the key's windows starting in [from, to], earliest first.
func (p *slidingProc) fetch(kb []byte, from, to int64) ([]slidingWin, error) {
	p.wins = p.wins[:0]
	lo := binary.BigEndian.AppendUint64(bytes.Clone(kb), uint64(max(from, 0)))
	hi := binary.BigEndian.AppendUint64(bytes.Clone(kb), uint64(to+1))
	for e, err := range p.wb.st.tbl.Range(lo, hi) {
		if err != nil {
			return nil, err
		}
		if len(e.Key) != len(kb)+8 {
			continue // another key that starts with this one's bytes
		}
		agg, err := p.wb.vc.Decode(e.Value)
		if err != nil {
			return nil, p.wb.st.err("value", e.Value, false, err)
		}
		p.wins = append(p.wins, slidingWin{start: int64(binary.BigEndian.Uint64(e.Key[len(kb):])), agg: agg, ts: e.Timestamp})
	}
	return p.wins, nil
}

// slidingUpdate is the processing of one record.
type slidingUpdate struct {
	p       *slidingProc
	c       *topo.Context
	r       topo.Record
	kb      []byte
	t       int64
	closeAt int64
	applied int // windows the record went into
}

// update folds the record into the window starting at start, whose
// aggregate so far is base (has: there is one; else the aggregation
// starts afresh) with latest record at baseTs; stored: the window exists in
// the store. A closed window is left alone.
func (u *slidingUpdate) update(start int64, base any, has bool, baseTs int64, stored bool) error {
	p := u.p
	end := start + p.diff
	if end < u.closeAt {
		u.c.Skip("record for a closed window")
		return nil
	}
	u.applied++
	agg := p.add(u.r.Key, u.r.Value, base, has)
	ts := u.t
	if has {
		ts = max(ts, baseTs)
	}
	key := p.wb.wkey(u.r.Key, Window{Start: topo.TimeOf(start), End: topo.TimeOf(end)})
	kb := binary.BigEndian.AppendUint64(bytes.Clone(u.kb), uint64(start))
	var old any
	if stored {
		old = base
	} else if err := p.wb.created(kb, start+p.wb.retention.Milliseconds(), end, ts); err != nil {
		return err
	}
	return p.wb.write(kb, u.r, key, old, agg, topo.TimeOf(ts))
}

// put stores a new window with a given aggregate, as it is (the window
// starting after the record, which the record is not in).
func (u *slidingUpdate) put(start int64, agg any, ts int64) error {
	p := u.p
	end := start + p.diff
	key := p.wb.wkey(u.r.Key, Window{Start: topo.TimeOf(start), End: topo.TimeOf(end)})
	kb := binary.BigEndian.AppendUint64(bytes.Clone(u.kb), uint64(start))
	if err := p.wb.created(kb, start+p.wb.retention.Milliseconds(), end, ts); err != nil {
		return err
	}
	return p.wb.write(kb, u.r, key, nil, agg, topo.TimeOf(ts))
}

// inOrder handles a record at t >= the time difference.
func (u *slidingUpdate) inOrder() error {
	p, t, d := u.p, u.t, u.p.diff
	wins, err := p.fetch(u.kb, t-2*d, t+1)
	if err != nil {
		return err
	}
	var (
		left, right       *slidingWin      // the aggregates for the record's own windows
		leftDone, rightOK bool             // its windows exist already
		prev              int64       = -1 // the latest record before t, if known
		starts                        = map[int64]bool{}
	)
	for i := range wins {
		w := &wins[i]
		starts[w.start] = true
		end := w.start + d
		switch {
		case end < t:
			// Entirely before the record: the last such holds the
			// records its left window starts from.
			left, prev = w, w.ts
		case end == t:
			leftDone = true
			if w.ts < t {
				prev = w.ts
			}
			if err := u.update(w.start, w.agg, true, w.ts, true); err != nil {
				return err
			}
		case w.start <= t:
			right = w
			if err := u.update(w.start, w.agg, true, w.ts, true); err != nil {
				return err
			}
		case w.start == t+1:
			rightOK = true
		default:
			return fmt.Errorf("engine: sliding window aggregation: a window starting at %d in the store at a record at %d", w.start, t)
		}
	}
	// The previous record's right window, if t falls in it and it is not
	// there yet.
	if prev >= 0 && !starts[prev+1] && prev+1+d >= t {
		if err := u.update(prev+1, nil, false, 0, false); err != nil {
			return err
		}
		// At t = prev+1+d that window is the record's left window too.
		leftDone = leftDone || prev+1 == t-d
	}
	// The record's left window [t-d, t].
	if !leftDone {
		if prev >= 0 && t-d <= prev && left != nil {
			if err := u.update(t-d, left.agg, true, t, false); err != nil {
				return err
			}
		} else if err := u.update(t-d, nil, false, 0, false); err != nil {
			return err
		}
	}
	// The record's right window [t+1, t+1+d], if records follow it.
	if !rightOK && right != nil && right.ts > t {
		return u.put(t+1, right.agg, right.ts)
	}
	return nil
}

// early handles a record at t < the time difference: its left window would
// start before the epoch, so records there share the window [0, d].
func (u *slidingUpdate) early() error {
	p, t := u.p, u.t
	wins, err := p.fetch(u.kb, 0, t+1)
	if err != nil {
		return err
	}
	var (
		combined, right *slidingWin
		rightOK         bool
		prev            int64 = -1
		starts                = map[int64]bool{}
	)
	for i := range wins {
		w := &wins[i]
		starts[w.start] = true
		switch {
		case w.start == 0:
			combined = w
			if w.ts < t {
				prev = w.ts
			}
		case w.start <= t:
			right = w
			if err := u.update(w.start, w.agg, true, w.ts, true); err != nil {
				return err
			}
		case w.start == t+1:
			rightOK = true
		default:
			return fmt.Errorf("engine: sliding window aggregation: a window starting at %d in the store at an early record at %d", w.start, t)
		}
	}
	// With no right window found, the combined window holds only records
	// after t, if any: they make the record's right window.
	if right == nil && combined != nil && combined.ts > t {
		right = combined
	}
	if !rightOK && right != nil && right.ts > t {
		if err := u.put(t+1, right.agg, right.ts); err != nil {
			return err
		}
	}
	if prev >= 0 && !starts[prev+1] {
		if err := u.update(prev+1, nil, false, 0, false); err != nil {
			return err
		}
	}
	if combined == nil {
		return u.update(0, nil, false, 0, false)
	}
	return u.update(0, combined.agg, true, combined.ts, true)
}
