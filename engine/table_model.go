package engine

import (
	"fmt"
	"time"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
)

// Which table updates go downstream depends, in Kafka Streams, on two
// things a table node learns while the topology is built: whether it keeps
// the table in a store of its own (is "materialized"), and whether it sends
// old values ("sendOldValues"). Operations turn them on upstream as they are
// added — a join materializes the source tables it reads, a re-grouping or
// a suppression makes its parent send old values, a filter asks its parent
// for old values but does not force a store — and the processors read them
// when they start. ktable mirrors that bookkeeping (Kafka Streams'
// KTableImpl.enableSendingOldValues and valueGetterSupplier, and the
// enableSendingOldValues and view of each processor supplier), so that each
// of Oxbow's table nodes forwards the updates Kafka Streams' would:
//
//   - A source table (NewTable, ToTable, a foreign-key join's result) that is
//     not materialized forwards every update it is given at once, the delete
//     of a key it never had included (KTableSource without a store). One that
//     is materialized writes through the record cache and, like Kafka
//     Streams' caching store, drops an update from nothing to nothing when
//     the cache flushes it; without a cache it forwards it too.
//   - A filter that does not send old values forwards a delete for every
//     row that fails its predicate; one that does drops a change from
//     nothing to nothing (KTableFilter). A value mapper forwards every change
//     (KTableMapValues). Either, given [Materialized], writes through the
//     cache as a materialized source does.
//   - The table–table joins forward what KTableKTableInnerJoin, LeftJoin,
//     RightJoin and OuterJoin do; SuppressUntil passes every delete.
//
// Oxbow's tables always know the old value of a change, and forward it
// whether Kafka Streams would or not; only the choice of what goes
// downstream follows the model. The Builder option [OmitAbsentDeletes]
// restores Oxbow's former rule instead: no table node forwards a change
// from nothing to nothing.
//
// A nil *ktable stands for an aggregation's table (KStreamAggProcessorSupplier):
// always materialized, and sending old values whenever asked.
type ktable struct {
	kind ktableKind
	// queryable: the node keeps the table in a store of its own with Kafka
	// Streams' tuple forwarder (a materialized source, a filter or value
	// mapper given Materialized).
	queryable bool
	// sendOld is the processor supplier's sendOldValues; implOld is
	// KTableImpl's.
	sendOld, implOld bool
	// For ktableProcessor: the supplier's enableSendingOldValues, and its
	// view (the value getter a downstream join reads, which materializes
	// the source tables it reads through).
	enable func(force bool) bool
	view   func()
}

type ktableKind int

const (
	ktableSource    ktableKind = iota // KTableSource
	ktableProcessor                   // a KTableProcessorSupplier: filter, mapValues, join, suppress
)

// enableSendingOldValues is KTableImpl.enableSendingOldValues: it turns on
// old values on the table node (and what it needs upstream), and reports
// whether the node now sends them. Unless force, a source table that is not
// materialized refuses rather than be materialized for it.
func (t *ktable) enableSendingOldValues(force bool) bool {
	if t == nil {
		return true
	}
	if t.implOld {
		return true
	}
	switch t.kind {
	case ktableSource:
		if !force && !t.queryable {
			return false
		}
		t.sendOld, t.queryable = true, true
	default:
		if !t.enable(force) {
			return false
		}
	}
	t.implOld = true
	return true
}

// valueGetter is KTableImpl.valueGetterSupplier: a downstream operation
// will read the table's current values, so the source tables they come
// from are materialized.
func (t *ktable) valueGetter() {
	switch {
	case t == nil:
	case t.kind == ktableSource:
		t.queryable = true
	case t.view != nil:
		t.view()
	}
}

// derivedTable is the model of a filter or a value mapper of parent
// (KTableFilter, KTableMapValues); queryable with Materialized.
func derivedTable(parent *ktable, queryable bool) *ktable {
	t := &ktable{kind: ktableProcessor, queryable: queryable}
	t.enable = func(force bool) bool {
		if t.queryable {
			t.sendOld = true
			return true
		}
		if parent.enableSendingOldValues(force) {
			t.sendOld = true
		}
		return t.sendOld
	}
	t.view = func() {
		if !t.queryable {
			parent.valueGetter()
		}
	}
	return t
}

// OmitAbsentDeletes makes every table node of the Builder forward no
// change from nothing to nothing: a source table drops the delete of a key
// it does not have, a filter drops a row that neither passed nor passes,
// a join drops an update that leaves a key without a result before and
// after, a suppression drops a key added and deleted while it waited. So
// a table's stream (ToStream) has no tombstone of a key it never had. This
// was Oxbow's behaviour; by default tables forward what Kafka Streams'
// do, which writes such tombstones in many places (an unmaterialized source
// table forwards every delete it reads, a filter a delete for every row that
// fails it). Give it to [NewBuilder].
func OmitAbsentDeletes() Option {
	return func(o *options) { o.omitAbsent = true; o.set = append(o.set, "OmitAbsentDeletes") }
}

// openTable opens a table node's store: through the record cache if
// cached, else with every update written and forwarded at once; and, unless
// omit, forwarding what is written at once even when it is a change from
// nothing to nothing.
func (a *kvAccess) openTable(c *topo.Context, name string, kc, vc topo.Codec, cached, omit bool) error {
	if kc == nil || vc == nil {
		return fmt.Errorf("engine: store %q: %w", name, nilSerdes(kc == nil, vc == nil))
	}
	a.kc, a.vc = kc, vc
	var err error
	if cached {
		a.tbl, err = c.TableStore(name)
	} else {
		a.tbl, err = c.DirectTableStore(name)
	}
	if err != nil {
		return err
	}
	a.tbl.SetCodecs(kc, vc)
	a.tbl.SetForwardAbsent(!omit)
	return nil
}

// deleteAbsent is updateKey for the delete of a key the node found absent:
// see topo.TableStore.DeleteAbsent.
func (a *kvAccess) deleteAbsent(kb []byte, r topo.Record, ts time.Time) error {
	return a.tbl.DeleteAbsent(kb, ts.UnixMilli(), r)
}
