package postgres

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/oxbow-dev/oxbow/internal/javajson"
	"github.com/twmb/franz-go/pkg/kgo"
)

// streamState is a stream's decoding state.
type streamState struct {
	s         *Source
	conn      *pgx.Conn
	keys      map[tableName][]string
	db        string
	acks      *acks
	relations map[uint32]*table
	inTxn     bool
	txn       *txnAck
	xid       uint32
	commit    pglogrepl.LSN // the transaction's commit
	prevEnd   pglogrepl.LSN // where the transaction before it ended
	// With transaction metadata: the transaction's events so far, in all
	// and by table, and its tables in the order of their first events.
	txTotal   int64
	txByTable map[string]int64
	// The incremental snapshot: its progress, the chunk in flight, chunks
	// written that Kafka does not have all of yet, a table just completed,
	// and whether to read the next chunk at the next commit.
	inc       *incState
	chunk     *chunk
	pending   []progress
	doneTable string
	incNext   bool
	txTables  []string
	ts        time.Time
	skipBelow pglogrepl.LSN // transactions committed before it are in Kafka
	skipping  bool
	buf       []cell
	oldBuf    []cell
}

func (st *streamState) handle(ctx context.Context, x pglogrepl.XLogData) error {
	msg, err := pglogrepl.Parse(x.WALData)
	if err != nil {
		return fmt.Errorf("decoding a pgoutput message at %s: %w", x.WALStart, err)
	}
	s := st.s
	switch m := msg.(type) {
	case *pglogrepl.RelationMessage:
		tn := tableName{m.Namespace, m.RelationName}
		if sig, ok := s.signalTable(); !s.captures(tn) && !(ok && sig == tn) {
			st.relations[m.RelationID] = nil
			return nil
		}
		keys, err := primaryKey(ctx, st.conn, tn)
		if err != nil {
			return fmt.Errorf("the primary key of %s: %w", tn, err)
		}
		if len(keys) == 0 {
			keys = st.keys[tn] // the key was dropped: keep the one the topic has
		}
		t := s.newTable(tn, keys)
		conv := s.run.conv
		for _, c := range m.Columns {
			if !conv.knows(c.DataType) {
				// A type made since the session began.
				if err := conv.loadTypes(ctx, st.conn); err != nil {
					return err
				}
			}
			t.cols = append(t.cols, column{name: c.Name, oid: c.DataType, typmod: c.TypeModifier, key: containsString(keys, c.Name), conv: conv.resolve(c.DataType, c.TypeModifier, false)})
		}
		st.relations[m.RelationID] = t
	case *pglogrepl.BeginMessage:
		st.inTxn = true
		st.txn = st.acks.begin()
		st.xid, st.commit, st.ts = m.Xid, m.FinalLSN, m.CommitTime
		// A transaction that committed before what Kafka is known to have.
		st.skipping = m.FinalLSN < st.skipBelow
		if s.cfg.ProvideTransactionMetadata && !st.skipping {
			st.txTotal, st.txByTable = 0, map[string]int64{}
			st.txTables = st.txTables[:0]
			s.produce(ctx, st.acks, st.txn, st.txRecord("BEGIN", strconv.FormatUint(uint64(m.Xid), 10)+":"+strconv.FormatUint(uint64(x.WALStart), 10)))
		}
	case *pglogrepl.CommitMessage:
		if s.cfg.ProvideTransactionMetadata && !st.skipping && st.txByTable != nil {
			s.produce(ctx, st.acks, st.txn, st.txRecord("END", strconv.FormatUint(uint64(st.xid), 10)+":"+strconv.FormatUint(uint64(x.WALStart), 10)))
		}
		st.txByTable = nil
		st.acks.commit(st.txn, m.TransactionEndLSN)
		st.prevEnd = m.TransactionEndLSN
		st.inTxn, st.txn, st.skipping = false, nil, false
		for i := range st.pending {
			if st.pending[i].end == 0 {
				st.pending[i].end = m.TransactionEndLSN // the chunk's, in this transaction
			}
		}
		if st.incNext {
			return st.nextChunk(ctx)
		}
	case *pglogrepl.InsertMessage:
		t, err := st.table(m.RelationID)
		if t == nil || err != nil {
			return err
		}
		cells := st.cells(&st.buf, m.Tuple)
		if t.signal && !st.skipping {
			st.signal(ctx, t, cells)
		}
		st.emit(ctx, st.event('c', t, x.WALStart, nil, cells))
	case *pglogrepl.UpdateMessage:
		t, err := st.table(m.RelationID)
		if t == nil || err != nil {
			return err
		}
		after := st.cells(&st.buf, m.NewTuple)
		var before []cell
		if m.OldTuple != nil {
			before = st.cells(&st.oldBuf, m.OldTuple)
		}
		if before != nil && !sameKey(t, before, after) {
			// The primary key changed: Debezium writes the delete of the
			// old key, its tombstone and the create of the new one. An
			// unchanged TOASTed column is in the old row only under
			// REPLICA IDENTITY FULL; otherwise the new key's row has the
			// placeholder for it.
			for i := range after {
				if after[i].kind == 'u' && i < len(before) && before[i].kind == 't' {
					after[i] = before[i]
				}
			}
			del := st.event('d', t, x.WALStart, before, nil)
			del.keyFrom, del.newKey = before, after
			st.emit(ctx, del)
			st.emit(ctx, event{tombstone: true, t: t, keyFrom: before, newKey: after, ts: st.ts})
			create := st.event('c', t, x.WALStart, nil, after)
			create.oldKey = before
			st.emit(ctx, create)
			return nil
		}
		if m.OldTupleType != pglogrepl.UpdateMessageTupleTypeOld {
			before = nil // a key alone is no before image
		} else {
			// REPLICA IDENTITY FULL: an unchanged TOASTed value is the
			// old row's, as Debezium takes it.
			for i := range after {
				if after[i].kind == 'u' && i < len(before) && before[i].kind == 't' {
					after[i] = before[i]
				}
			}
		}
		st.emit(ctx, st.event('u', t, x.WALStart, before, after))
	case *pglogrepl.DeleteMessage:
		t, err := st.table(m.RelationID)
		if t == nil || err != nil {
			return err
		}
		before := st.cells(&st.oldBuf, m.OldTuple)
		st.emit(ctx, st.event('d', t, x.WALStart, before, nil))
		st.emit(ctx, event{tombstone: true, t: t, keyFrom: before, ts: st.ts})
	case *pglogrepl.TruncateMessage:
		for _, id := range m.RelationIDs {
			t, err := st.table(id)
			if err != nil {
				return err
			}
			if t != nil {
				st.emit(ctx, st.event('t', t, x.WALStart, nil, nil))
			}
		}
	}
	return nil
}

func (s *Source) captures(t tableName) bool {
	for _, x := range s.tables {
		if x == t {
			return true
		}
	}
	return false
}

// table is the relation a change names: nil if the source does not
// capture it.
func (st *streamState) table(id uint32) (*table, error) {
	t, ok := st.relations[id]
	if !ok {
		return nil, fmt.Errorf("a change of relation %d before its relation message", id)
	}
	return t, nil
}

func (st *streamState) cells(buf *[]cell, td *pglogrepl.TupleData) []cell {
	if td == nil {
		return nil
	}
	out := (*buf)[:0]
	for _, c := range td.Columns {
		switch c.DataType {
		case pglogrepl.TupleDataTypeText, pglogrepl.TupleDataTypeBinary:
			out = append(out, cell{kind: 't', text: c.Data})
		case pglogrepl.TupleDataTypeToast:
			out = append(out, cell{kind: 'u'})
		default:
			out = append(out, cell{kind: 'n'})
		}
	}
	*buf = out
	return out
}

func sameKey(t *table, a, b []cell) bool {
	for i, c := range t.cols {
		if !c.key || i >= len(a) || i >= len(b) {
			continue
		}
		if a[i].kind == 'u' || b[i].kind == 'u' {
			continue
		}
		if a[i].kind != b[i].kind || string(a[i].text) != string(b[i].text) {
			return false
		}
	}
	return true
}

func (st *streamState) event(op byte, t *table, lsn pglogrepl.LSN, before, after []cell) event {
	return event{op: op, t: t, before: before, after: after, db: st.db, lsn: lsn, commit: st.commit, prevEnd: st.prevEnd, xid: st.xid, ts: st.ts}
}

func (st *streamState) emit(ctx context.Context, ev event) {
	if !ev.incremental {
		st.streamed(ev)
	}
	if st.skipping || !ev.t.captured || st.s.skips(ev) {
		return
	}
	if st.txn == nil { // a change outside a transaction: pgoutput sends none
		st.txn = st.acks.begin()
	}
	if st.txByTable != nil && !ev.tombstone && !ev.incremental {
		name := ev.t.name.String()
		if _, ok := st.txByTable[name]; !ok {
			st.txTables = append(st.txTables, name)
		}
		st.txTotal++
		st.txByTable[name]++
		ev.txTotal, ev.txColl = st.txTotal, st.txByTable[name]
	}
	st.s.produce(ctx, st.acks, st.txn, ev.record(st.s.cfg.TopicPrefix, st.s.run))
	if !ev.tombstone {
		st.s.changes.Add(1)
	}
}

// txRecord is the record of a transaction's BEGIN or END on the
// transaction topic, as Debezium's TransactionMonitor writes it: keyed by
// the id ("<xid>:<LSN>", the LSN of the message, so that the END's is not
// the BEGIN's, as the events' transaction blocks have their own),
// the END with the count of the transaction's events in all and by table
// (in the order of the Java HashMap Debezium counts them in).
func (st *streamState) txRecord(status, id string) *kgo.Record {
	key := append(append([]byte(`{"id":"`), id...), `"}`...)
	b := make([]byte, 0, 128)
	b = append(b, `{"status":"`...)
	b = append(b, status...)
	b = append(b, `","id":"`...)
	b = append(b, id...)
	if status == "BEGIN" {
		b = append(b, `","event_count":null,"data_collections":null`...)
	} else {
		b = append(b, `","event_count":`...)
		b = strconv.AppendInt(b, st.txTotal, 10)
		b = append(b, `,"data_collections":[`...)
		pairs := make([]hstorePair, len(st.txTables))
		for i, t := range st.txTables {
			pairs[i] = hstorePair{key: t}
		}
		for i, p := range javaHashMapOrder(pairs) {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"data_collection":`...)
			b = javajson.AppendString(b, []byte(p.key))
			b = append(b, `,"event_count":`...)
			b = strconv.AppendInt(b, st.txByTable[p.key], 10)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = append(b, `,"ts_ms":`...)
	b = strconv.AppendInt(b, st.ts.UnixMilli(), 10)
	b = append(b, '}')
	return &kgo.Record{Topic: st.s.txTopic(), Key: key, Value: b, Timestamp: st.ts}
}
