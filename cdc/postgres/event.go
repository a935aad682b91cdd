package postgres

import (
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/oxbow-dev/oxbow/internal/javajson"
	"github.com/twmb/franz-go/pkg/kgo"
)

// event is a change to write as a Debezium change event.
type event struct {
	op            byte // c, u, d, r, t
	tombstone     bool
	t             *table
	before, after []cell
	keyFrom       []cell // the cells the key is made of, if not after or before
	db            string
	snapshot      bool
	marker        string // a snapshot event's source.snapshot
	lsn           pglogrepl.LSN
	commit        pglogrepl.LSN
	prevEnd       pglogrepl.LSN // the end of the transaction before, 0 if unknown
	xid           uint32
	ts            time.Time
	// Set on the events of a primary-key change: the new key on the
	// delete and its tombstone, the old one on the create.
	newKey, oldKey []cell
	incremental    bool // a row of an incremental snapshot
	// With transaction metadata, the event's place in its transaction, in
	// all and among its table's events (from 1; 0: no metadata).
	txTotal, txColl int64
}

// record makes the Kafka record: the key is the primary key's columns
// (null for a truncate), the value Debezium's envelope without a schema,
// the headers Debezium's.
func (ev event) record(prefix string, run *runInfo) *kgo.Record {
	r := &kgo.Record{Topic: ev.t.topic, Timestamp: ev.ts, Headers: run.headers}
	keyCells := ev.keyFrom
	if keyCells == nil {
		keyCells = ev.after
		if keyCells == nil {
			keyCells = ev.before
		}
	}
	if ev.op != 't' && keyCells != nil {
		r.Key = appendRow(nil, ev.t.cols, keyCells, true, run.conv)
	} else if ev.op == 't' && ev.t.compacted {
		// A compacted topic refuses a record without a key: the
		// truncate's is the empty object, which is no row's.
		r.Key = []byte("{}")
	}
	switch {
	case ev.newKey != nil:
		r.Headers = append(r.Headers[:len(r.Headers):len(r.Headers)], kgo.RecordHeader{Key: "__debezium.newkey", Value: appendRow(nil, ev.t.cols, ev.newKey, true, run.conv)})
	case ev.oldKey != nil:
		r.Headers = append(r.Headers[:len(r.Headers):len(r.Headers)], kgo.RecordHeader{Key: "__debezium.oldkey", Value: appendRow(nil, ev.t.cols, ev.oldKey, true, run.conv)})
	}
	if ev.tombstone {
		return r
	}
	b := make([]byte, 0, 512)
	b = append(b, `{"before":`...)
	if ev.before != nil {
		b = appendRow(b, ev.t.cols, ev.before, false, run.conv)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"after":`...)
	if ev.after != nil {
		b = appendRow(b, ev.t.cols, ev.after, false, run.conv)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"source":{"version":"oxbow","connector":"postgresql","name":`...)
	b = javajson.AppendString(b, []byte(prefix))
	us := ev.ts.UnixMicro()
	b = append(b, `,"ts_ms":`...)
	b = strconv.AppendInt(b, us/1000, 10)
	b = append(b, `,"snapshot":`...)
	if ev.snapshot {
		b = javajson.AppendString(b, []byte(ev.marker))
	} else {
		b = append(b, `"false"`...)
	}
	b = append(b, `,"db":`...)
	b = javajson.AppendString(b, []byte(ev.db))
	b = append(b, `,"sequence":"[`...)
	if ev.prevEnd == 0 {
		b = append(b, "null"...)
	} else {
		b = append(b, `\"`...)
		b = strconv.AppendUint(b, uint64(ev.prevEnd), 10)
		b = append(b, `\"`...)
	}
	b = append(b, `,\"`...)
	b = strconv.AppendUint(b, uint64(ev.lsn), 10)
	b = append(b, `\"]","ts_us":`...)
	b = strconv.AppendInt(b, us, 10)
	b = append(b, `,"ts_ns":`...)
	b = strconv.AppendInt(b, us*1000, 10)
	b = append(b, `,"schema":`...)
	b = javajson.AppendString(b, []byte(ev.t.name.schema))
	b = append(b, `,"table":`...)
	b = javajson.AppendString(b, []byte(ev.t.name.name))
	if ev.incremental {
		// Debezium writes neither for an incremental snapshot's rows.
		b = append(b, `,"txId":null,"lsn":null`...)
	} else {
		b = append(b, `,"txId":`...)
		b = strconv.AppendUint(b, uint64(ev.xid), 10)
		b = append(b, `,"lsn":`...)
		b = strconv.AppendUint(b, uint64(ev.lsn), 10)
	}
	b = append(b, `,"xmin":null,"origin":null,"origin_lsn":null,"commit_lsn":`...)
	b = strconv.AppendUint(b, uint64(ev.commit), 10)
	if ev.txTotal > 0 {
		// The id of the transaction at the event's position.
		b = append(b, `},"transaction":{"id":"`...)
		b = strconv.AppendUint(b, uint64(ev.xid), 10)
		b = append(b, ':')
		b = strconv.AppendUint(b, uint64(ev.lsn), 10)
		b = append(b, `","total_order":`...)
		b = strconv.AppendInt(b, ev.txTotal, 10)
		b = append(b, `,"data_collection_order":`...)
		b = strconv.AppendInt(b, ev.txColl, 10)
		b = append(b, `},"op":"`...)
	} else {
		b = append(b, `},"transaction":null,"op":"`...)
	}
	b = append(b, ev.op)
	now := time.Now().UnixMicro()
	b = append(b, `","ts_ms":`...)
	b = strconv.AppendInt(b, now/1000, 10)
	b = append(b, `,"ts_us":`...)
	b = strconv.AppendInt(b, now, 10)
	b = append(b, `,"ts_ns":`...)
	b = strconv.AppendInt(b, now*1000, 10)
	b = append(b, '}')
	r.Value = b
	return r
}
