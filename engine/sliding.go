package engine

import (
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
// [TimeWindows.Grace]: a window closes once the aggregation's stream time
// passes its end by more than the grace; a record whose windows have all
// closed is dropped. Records without a value are dropped, counts included.
//
// A record earlier than d after the epoch would open a window starting
// before it: such records share the window [0, d] instead, as in Kafka
// Streams.
//
// A record updates several windows; through the record cache, each
// window's updates until the next commit go downstream as one, as in Kafka
// Streams. Without a cache, as there, a record does not see windows that
// started more than the store's retention (twice the time difference plus
// grace, or [Retention]) before the latest window written.
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
// Kafka Streams' KStreamSlidingWindowAggregate (which reads a key's windows
// latest first, as its RocksDB store can): for a record at t it updates
// every existing window holding t, latest first, then creates the window
// starting just after the previous record when t falls in it, the record's
// own window ending at t (seeded with the windows before it) and the window
// starting just after t when later records exist. A record without a key
// or value is dropped before it moves the processor's stream time.
type slidingProc struct {
	wb   windowBase
	add  aggFunc
	c    *topo.Context
	wins []slidingWin
}

func (p *slidingProc) Init(c *topo.Context) error { p.c = c; return p.wb.open(c) }
func (p *slidingProc) Close() error               { p.wb.close(); return nil }

func (p *slidingProc) Process(r topo.Record) error {
	c, wb := p.c, &p.wb
	if r.Key == nil || r.Value == nil {
		c.Skip("record without a key or value in an aggregation")
		return nil
	}
	ikb, err := innerKey(r, wb.ikc)
	if err != nil {
		return wb.codecErr("key", nil, true, err)
	}
	t := r.Timestamp.UnixMilli()
	now := wb.clock.Observe(c, t)
	u := slidingUpdate{p: p, c: c, r: r, kb: ikb, t: t, closeTime: now - wb.grace}
	// Kafka Streams looks for final results only after a record that is
	// neither too late nor early.
	final := false
	switch {
	case t+wb.size < u.closeTime:
		// Even the window starting after the record has closed.
		c.Skip("record for a closed window")
	case t < wb.size:
		err = u.early()
	default:
		err, final = u.reverse(), true
	}
	if err != nil {
		return err
	}
	if u.applied == 0 {
		if err := c.Late("record for closed windows only"); err != nil {
			return err
		}
	}
	if err := wb.expire(); err != nil || !final {
		return err
	}
	return wb.maybeEmitFinal(c, r, u.closeTime)
}

// fetch reads the key's windows starting in [from, to] that the
// aggregation sees (windowBase.visible), earliest first.
func (p *slidingProc) fetch(kb []byte, from, to int64) ([]slidingWin, error) {
	p.wins = p.wins[:0]
	for e, err := range p.wb.rangeWindows(suffixed(kb, max(from, 0)), suffixed(kb, to+1)) {
		if err != nil {
			return nil, err
		}
		if len(e.Key) != len(kb)+8 {
			continue // another key that starts with this one's bytes
		}
		start := int64(binary.BigEndian.Uint64(e.Key[len(kb):]))
		if !p.wb.visible(start) {
			continue
		}
		agg, err := p.wb.vc.Decode(e.Value)
		if err != nil {
			return nil, p.wb.codecErr("value", e.Value, false, err)
		}
		p.wins = append(p.wins, slidingWin{start: start, agg: agg, ts: e.Timestamp})
	}
	return p.wins, nil
}

// slidingUpdate is the processing of one record.
type slidingUpdate struct {
	p         *slidingProc
	c         *topo.Context
	r         topo.Record
	kb        []byte // the record's key, encoded
	t         int64
	closeTime int64
	applied   int // windows the record went into
}

// update folds the record into the window starting at start (Kafka
// Streams' updateWindowAndForward), whose aggregate so far is base (has:
// there is one; else the aggregation starts afresh) with latest record at
// baseTs; stored: the window is in the store. A closed window (ending
// before the close time) is left alone.
func (u *slidingUpdate) update(start int64, base any, has bool, baseTs int64, stored bool) error {
	wb := &u.p.wb
	end := start + wb.size
	if end < u.closeTime {
		u.c.Skip("record for a closed window")
		return nil
	}
	u.applied++
	agg := u.p.add(u.r.Key, u.r.Value, base, has)
	ts := u.t
	if has {
		ts = max(ts, baseTs)
	}
	kb := suffixed(u.kb, start)
	var old any
	if stored {
		old = base
	} else if err := wb.created(kb, end, ts); err != nil {
		return err
	}
	return wb.write(kb, u.r, wb.wkey(u.r.Key, Window{Start: topo.TimeOf(start), End: topo.TimeOf(end)}), old, agg, ts, false)
}

// putRight stores the window starting just after the record, which the
// record is not in, with the aggregate and timestamp of the windows after
// it (Kafka Streams' createCurrentRecordRightWindow), closed or not.
func (u *slidingUpdate) putRight(w *slidingWin) error {
	wb := &u.p.wb
	start := u.t + 1
	end := start + wb.size
	kb := suffixed(u.kb, start)
	if err := wb.created(kb, end, w.ts); err != nil {
		return err
	}
	return wb.write(kb, u.r, wb.wkey(u.r.Key, Window{Start: topo.TimeOf(start), End: topo.TimeOf(end)}), nil, w.agg, w.ts, false)
}

// reverse handles a record at t >= the time difference (Kafka Streams'
// processReverse): it visits the key's windows from the one starting just
// after t back to the latest one ending before t.
func (u *slidingUpdate) reverse() error {
	t, d := u.t, u.p.wb.size
	wins, err := u.p.fetch(u.kb, t-2*d, t+1)
	if err != nil {
		return err
	}
	var (
		left, right         *slidingWin // the aggregates for the record's own windows
		leftDone, rightDone bool        // its windows exist already
		prev                int64       // the latest record before t, if hasPrev
		hasPrev             bool
		starts              = map[int64]bool{} // the windows visited
	)
visit:
	for i := len(wins) - 1; i >= 0; i-- {
		w := &wins[i]
		starts[w.start] = true
		end := w.start + d
		switch {
		case w.start == t+1:
			rightDone = true
		case end > t:
			if right == nil {
				right = w
			}
			if err := u.update(w.start, w.agg, true, w.ts, true); err != nil {
				return err
			}
		case end == t:
			leftDone = true
			if err := u.update(w.start, w.agg, true, w.ts, true); err != nil {
				return err
			}
			if w.ts >= t {
				// A record at t already made every window there is.
				return nil
			}
			prev, hasPrev = w.ts, true
		default:
			left, prev, hasPrev = w, w.ts, true
			break visit
		}
	}
	// Kafka Streams' createWindows. The previous record's right window, if
	// t falls in it and it is not there yet.
	if hasPrev && !starts[prev+1] && prev+1+d >= t {
		if err := u.update(prev+1, nil, false, 0, false); err != nil {
			return err
		}
	}
	// The record's left window [t-d, t], from the records before t in it.
	if !leftDone {
		if hasPrev && left != nil && t-d <= prev {
			if err := u.update(t-d, left.agg, true, t, false); err != nil {
				return err
			}
		} else if err := u.update(t-d, nil, false, 0, false); err != nil {
			return err
		}
	}
	// The record's right window [t+1, t+1+d], if records follow it.
	if !rightDone && right != nil && right.ts > t {
		return u.putRight(right)
	}
	return nil
}

// early handles a record at t < the time difference (Kafka Streams'
// processEarly): its left window would start before the epoch, so records
// there share the window [0, d].
func (u *slidingUpdate) early() error {
	t := u.t
	wins, err := u.p.fetch(u.kb, 0, t+1)
	if err != nil {
		return err
	}
	var (
		combined, right *slidingWin
		rightDone       bool
		prev            int64
		hasPrev         bool
		starts          = map[int64]bool{}
	)
	for i := range wins {
		w := &wins[i]
		starts[w.start] = true
		switch {
		case w.start == 0:
			combined = w
			if w.ts < t {
				prev, hasPrev = w.ts, true
			}
		case w.start <= t:
			right = w
			if err := u.update(w.start, w.agg, true, w.ts, true); err != nil {
				return err
			}
		case w.start == t+1:
			rightDone = true
		default:
			return fmt.Errorf("engine: sliding window aggregation: a window starting at %d in the store at an early record at %d", w.start, t)
		}
	}
	// With no right window found, the combined window holds only records
	// after t, if any: they make the record's right window.
	if right == nil && combined != nil && combined.ts > t {
		right = combined
	}
	if !rightDone && right != nil && right.ts > t {
		if err := u.putRight(right); err != nil {
			return err
		}
	}
	if hasPrev && !starts[prev+1] {
		if err := u.update(prev+1, nil, false, 0, false); err != nil {
			return err
		}
	}
	if combined == nil {
		return u.update(0, nil, false, 0, false)
	}
	return u.update(0, combined.agg, true, combined.ts, true)
}
