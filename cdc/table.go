package cdc

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// Column is a key function for NewTable: the key is the primary key's
// column of that name (JSON-decoded into K).
func Column[K any](name string) func(Row) (K, error) {
	return func(r Row) (K, error) {
		var k K
		v, ok := r[name]
		if !ok {
			return k, fmt.Errorf("the key has no column %q", name)
		}
		if err := json.Unmarshal(v, &k); err != nil {
			return k, fmt.Errorf("column %q: %w", name, err)
		}
		return k, nil
	}
}

// change is a decoded event, re-keyed by the table's key: the operation,
// the after image's JSON and the position.
type change struct {
	Op  Op
	Row json.RawMessage
	Pos Position
}

// rowState is a key's row as the table keeps it: the row's JSON (deleted
// rows are kept, without it, so that a replayed older event does not bring
// them back) and the position of the change that made it.
type rowState struct {
	Row     json.RawMessage
	Pos     Position
	Deleted bool
}

// changeSerde and rowSerde write a byte (the operation; deleted or not),
// the position's two numbers and the row's JSON, as it came.
var (
	changeSerde = serde.Func(func(c change) ([]byte, error) {
		return appendPosition(append(make([]byte, 0, 17+len(c.Row)), c.Op[0]), c.Pos, c.Row), nil
	}, func(b []byte) (change, error) {
		if len(b) < 17 {
			return change{}, fmt.Errorf("cdc: a change of %d bytes", len(b))
		}
		op := Op(b[:1])
		switch op {
		case Create, Update, Delete, Read, Truncate:
		default:
			return change{}, fmt.Errorf("cdc: a change with the operation %q", op)
		}
		return change{Op: op, Pos: readPosition(b[1:]), Row: b[17:]}, nil
	})
	rowSerde = serde.Func(func(r rowState) ([]byte, error) {
		flags := byte(0)
		if r.Deleted {
			flags = 1
		}
		return appendPosition(append(make([]byte, 0, 17+len(r.Row)), flags), r.Pos, r.Row), nil
	}, func(b []byte) (rowState, error) {
		if len(b) < 17 {
			return rowState{}, fmt.Errorf("cdc: a row of %d bytes", len(b))
		}
		r := rowState{Pos: readPosition(b[1:]), Deleted: b[0]&1 != 0}
		if len(b) > 17 {
			r.Row = bytes.Clone(b[17:])
		}
		return r, nil
	})
)

func appendPosition(b []byte, p Position, row []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(p.Commit))
	b = binary.BigEndian.AppendUint64(b, uint64(p.LSN))
	return append(b, row...)
}

func readPosition(b []byte) Position {
	return Position{Commit: int64(binary.BigEndian.Uint64(b)), LSN: int64(binary.BigEndian.Uint64(b[8:]))}
}

// NewTable reads a topic of Debezium change events (any shape Decode
// reads) as a table keyed by K, whose values are the rows decoded from JSON
// into V. key makes a K of the primary key's columns (see [Column]); the
// table is repartitioned by K's serde, so it co-partitions with a stream
// keyed alike and joins it (engine.Join, engine.JoinForeignKey).
//
// Creates, snapshot reads and updates upsert the row (a column with the
// unavailable-TOAST placeholder keeps its previous value); deletes delete
// it; a primary-key change is the delete of the old key and the create of
// the new one. A truncate empties the table: it is sent to every partition
// of the repartition topic, and there deletes the rows changed before it
// (by position: a row the truncating transaction or a later one wrote
// stays, whichever partition of the source topic it came through first).
//
// Changes are ordered by their position in the database's log
// ([Source.Position]): an event no later than the last one applied to its
// key — a duplicate replayed after a connector restart — changes nothing,
// nor does one from before the last truncate. Events without positions are
// applied in the order they come. Tombstones are ignored (the delete before
// them deleted). Events that do not decode, whose key is not a K or whose
// row is not a V are skipped and counted.
//
// The rows are kept in the store "<name>-rows" (a deleted row leaves its
// key and position there), the last truncate's position in
// "<name>-truncated", and the table in "<name>" (queryable under that
// name); name also names the nodes and internal topics.
func NewTable[K, V any](b *engine.Builder, name, topic string, key func(Row) (K, error), keys serde.Serde[K], values serde.Serde[V], opts ...Option) *engine.Table[K, V] {
	o := makeOptions(opts)
	raw := engine.NewStream(b, topic, serde.Bytes, serde.Bytes, engine.Named(name+"-events"))
	decoded := engine.Process(raw, func() engine.Processor[[]byte, []byte, K, change] {
		return engine.ProcessorFunc[[]byte, []byte, K, change](func(ctx *engine.ProcessorContext[K, change], rec engine.Record[[]byte, []byte]) error {
			var value []byte
			if !rec.Tombstone {
				value = rec.Value
			}
			rawKey, value, err := o.toJSON(rec.Key, value)
			if errors.Is(err, serde.ErrUnavailable) {
				return err // not the event's fault: the instance stops
			}
			var ev Event
			var after json.RawMessage
			if err == nil {
				ev, after, err = decode(rawKey, value, false)
			}
			if err != nil {
				ctx.Skip("cdc: " + err.Error())
				return nil
			}
			c := change{Op: ev.Op, Pos: ev.Source.Position()}
			var k K
			switch ev.Op {
			case Tombstone, Message:
				return nil
			case Truncate:
				// For every partition, under the zero key.
				return ctx.Forward(engine.Record[K, change]{Key: k, Value: c, Timestamp: rec.Timestamp, Headers: rec.Headers})
			}
			if k, err = key(ev.Key); err != nil {
				ctx.Skip("cdc: the key: " + err.Error())
				return nil
			}
			if ev.Op != Delete {
				c.Row = after
			}
			return ctx.Forward(engine.Record[K, change]{Key: k, Value: c, Timestamp: rec.Timestamp, Headers: rec.Headers})
		})
	}, engine.Named(name+"-decode"))
	byKey := decoded.WithSerdes(keys, changeSerde).RepartitionBy(func(_ K, c change, n int) []int {
		if c.Op != Truncate {
			return nil // by the key
		}
		all := make([]int, n)
		for i := range all {
			all[i] = i
		}
		return all
	}, engine.Named(name+"-by-key"))
	rows := engine.NewKeyValueStore(name+"-rows", keys, rowSerde)
	truncated := engine.NewKeyValueStore(name+"-truncated", serde.String, serde.JSON[Position]())
	applied := engine.Process(byKey, func() engine.Processor[K, change, K, V] {
		return &applier[K, V]{rowsDef: rows, truncatedDef: truncated}
	}, engine.Named(name+"-apply"), engine.WithStores(rows, truncated))
	return applied.WithSerdes(keys, values).ToTable(engine.Named(name), engine.Materialized(name))
}

// applier applies a partition's changes to its rows.
type applier[K, V any] struct {
	rowsDef      *engine.KeyValueStoreDef[K, rowState]
	truncatedDef *engine.KeyValueStoreDef[string, Position]
	rows         engine.KeyValueStore[K, rowState]
	truncated    engine.KeyValueStore[string, Position]
}

func (a *applier[K, V]) Init(ctx *engine.ProcessorContext[K, V]) error {
	var err error
	if a.rows, err = a.rowsDef.Open(ctx); err != nil {
		return err
	}
	a.truncated, err = a.truncatedDef.Open(ctx)
	return err
}

const lastTruncate = "last"

func (a *applier[K, V]) Process(ctx *engine.ProcessorContext[K, V], rec engine.Record[K, change]) error {
	c := rec.Value
	trunc, _, err := a.truncated.Get(lastTruncate)
	if err != nil {
		return err
	}
	if c.Op == Truncate {
		return a.truncate(ctx, rec, trunc)
	}
	if !c.Pos.IsZero() && !trunc.IsZero() && !trunc.Before(c.Pos) {
		return nil // changed before the last truncate
	}
	s, ok, err := a.rows.Get(rec.Key)
	if err != nil {
		return err
	}
	if ok && !c.Pos.IsZero() && !s.Pos.Before(c.Pos) {
		return nil // replayed
	}
	if c.Op == Delete {
		if err := a.rows.Put(rec.Key, rowState{Pos: c.Pos, Deleted: true}); err != nil {
			return err
		}
		if !ok || s.Deleted {
			return nil
		}
		return ctx.Forward(engine.Record[K, V]{Key: rec.Key, Tombstone: true, Timestamp: rec.Timestamp, Headers: rec.Headers})
	}
	row := c.Row
	if ok && !s.Deleted && mayHaveUnavailable(row) {
		if row, err = mergeJSON(s.Row, row); err != nil {
			ctx.Skip("cdc: the row: " + err.Error())
			return nil
		}
	}
	var v V
	if err := json.Unmarshal(row, &v); err != nil {
		ctx.Skip(fmt.Sprintf("cdc: the row: not a %T: %v", v, err))
		return nil
	}
	if err := a.rows.Put(rec.Key, rowState{Row: row, Pos: c.Pos}); err != nil {
		return err
	}
	return ctx.Forward(engine.Record[K, V]{Key: rec.Key, Value: v, Timestamp: rec.Timestamp, Headers: rec.Headers})
}

// mergeJSON is Merge on rows' JSON.
func mergeJSON(previous, after json.RawMessage) (json.RawMessage, error) {
	var p, a Row
	if err := json.Unmarshal(previous, &p); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(after, &a); err != nil {
		return nil, err
	}
	return json.Marshal(Merge(p, a))
}

// truncate deletes the rows changed before the truncate (and their
// deleted markers: the truncate's position now keeps older changes out).
func (a *applier[K, V]) truncate(ctx *engine.ProcessorContext[K, V], rec engine.Record[K, change], last Position) error {
	if !rec.Value.Pos.IsZero() && !last.Before(rec.Value.Pos) {
		return nil // replayed
	}
	if err := a.truncated.Put(lastTruncate, rec.Value.Pos); err != nil {
		return err
	}
	type gone struct {
		key  K
		live bool
	}
	var drop []gone
	for kv, err := range a.rows.All() {
		if err != nil {
			return err
		}
		if rec.Value.Pos.IsZero() || kv.Value.Pos.Before(rec.Value.Pos) {
			drop = append(drop, gone{kv.Key, !kv.Value.Deleted})
		}
	}
	for _, g := range drop {
		if err := a.rows.Delete(g.key); err != nil {
			return err
		}
		if g.live {
			if err := ctx.Forward(engine.Record[K, V]{Key: g.key, Tombstone: true, Timestamp: rec.Timestamp, Headers: rec.Headers}); err != nil {
				return err
			}
		}
	}
	return nil
}
