package cdc

import (
	"encoding/json"
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

// change is a decoded event, re-keyed by the table's key.
type change struct {
	Op  Op    `json:"op"`
	Row Row   `json:"row,omitempty"`
	LSN int64 `json:"lsn,omitempty"`
}

// rowState is a key's row as the table keeps it: the row (deleted rows
// are kept, without columns, so that a replayed older event does not bring
// them back) and the log position of the change that made it.
type rowState struct {
	Row     Row   `json:"row,omitempty"`
	LSN     int64 `json:"lsn,omitempty"`
	Deleted bool  `json:"deleted,omitempty"`
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
// the new one. An event at a log position (LSN) no later than the one that
// last changed its key — a duplicate replayed after a connector restart —
// changes nothing. Tombstones are ignored (the delete before them
// deleted). Events that do not decode, whose key is not a K or whose row is
// not a V are skipped and counted; so are truncates, which this table
// does not apply yet (a truncate reaches one partition of the topic).
//
// The rows are kept in the store "<name>-rows" and the table in "<name>"
// (queryable under that name); name also names the nodes and internal
// topics.
func NewTable[K, V any](b *engine.Builder, name, topic string, key func(Row) (K, error), keys serde.Serde[K], values serde.Serde[V]) *engine.Table[K, V] {
	raw := engine.NewStream(b, topic, serde.Bytes, serde.Bytes, engine.Named(name+"-events"))
	decoded := engine.Process(raw, func() engine.Processor[[]byte, []byte, K, change] {
		return engine.ProcessorFunc[[]byte, []byte, K, change](func(ctx *engine.ProcessorContext[K, change], rec engine.Record[[]byte, []byte]) error {
			var value []byte
			if !rec.Tombstone {
				value = rec.Value
			}
			ev, err := Decode(rec.Key, value)
			if err != nil {
				ctx.Skip("cdc: " + err.Error())
				return nil
			}
			switch ev.Op {
			case Tombstone:
				return nil
			case Truncate:
				ctx.Skip("cdc: a truncate (not applied)")
				return nil
			}
			k, err := key(ev.Key)
			if err != nil {
				ctx.Skip("cdc: the key: " + err.Error())
				return nil
			}
			c := change{Op: ev.Op, LSN: ev.Source.LSN}
			if ev.Op != Delete {
				c.Row = ev.After
				if _, err := decodeRow[V](c.Row); err != nil {
					ctx.Skip("cdc: the row: " + err.Error())
					return nil
				}
			}
			return ctx.Forward(engine.Record[K, change]{Key: k, Value: c, Timestamp: rec.Timestamp, Headers: rec.Headers})
		})
	}, engine.Named(name+"-decode"))
	states := engine.Aggregate(decoded.WithSerdes(keys, serde.JSON[change]()).GroupByKey(engine.Named(name+"-by-key")),
		func() rowState { return rowState{} },
		func(_ K, c change, s rowState) rowState {
			if c.LSN != 0 && c.LSN <= s.LSN {
				return s // replayed
			}
			if c.Op == Delete {
				return rowState{LSN: c.LSN, Deleted: true}
			}
			row := c.Row
			if !s.Deleted {
				row = Merge(s.Row, c.Row)
			}
			return rowState{Row: row, LSN: c.LSN}
		},
		engine.Named(name+"-rows"), engine.Materialized(name+"-rows"), engine.ValueSerde(serde.JSON[rowState]()))
	live := states.Filter(func(_ K, s rowState) bool { return !s.Deleted && s.Row != nil }, engine.Named(name+"-live"))
	return engine.MapTableValues(live, func(_ K, s rowState) V {
		v, _ := decodeRow[V](s.Row) // checked when the change came
		return v
	}, engine.Named(name), engine.Materialized(name), engine.ValueSerde(values))
}

func decodeRow[V any](r Row) (V, error) {
	var v V
	b, err := json.Marshal(r)
	if err != nil {
		return v, err
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return v, fmt.Errorf("not a %T: %w", v, err)
	}
	return v, nil
}
