package postgres

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/twmb/franz-go/pkg/kgo"
)

// session connects, takes the initial snapshot if it is not done, and
// streams until ctx is done or something fails.
func (s *Source) session(ctx context.Context) error {
	s.sessions.Add(1)
	cc, err := s.connConfig(false)
	if err != nil {
		return &fatal{err}
	}
	pc, err := pgx.ParseConfig(s.cfg.DSN)
	if err != nil {
		return &fatal{err}
	}
	pc.Config = *cc
	conn, err := pgx.ConnectConfig(ctx, pc)
	if err != nil {
		return refused(fmt.Errorf("connecting to the database: %w", err))
	}
	defer conn.Close(context.WithoutCancel(ctx))
	keys, err := s.ensurePublication(ctx, conn)
	if err != nil {
		return err
	}
	if err := s.run.conv.loadTypes(ctx, conn); err != nil {
		return err
	}
	st, done, err := s.readState(ctx)
	if err != nil {
		return err
	}
	if done && st.Snapshot == "done" {
		var added []string
		for _, t := range s.tables {
			if !containsString(st.Tables, t.String()) && (st.Incremental == nil || !containsString(st.Incremental.Tables, t.String())) {
				added = append(added, t.String())
			}
		}
		if len(added) > 0 && s.cfg.SignalDataCollection == "" {
			return fatalf("the tables %v were not in the slot %s's initial snapshot (it has %v): capture them with a new slot, or set Config.SignalDataCollection to take incremental snapshots", added, s.cfg.Slot, st.Tables)
		}
		if len(added) > 0 {
			// Tables added later: an incremental snapshot of each.
			if st.Incremental == nil {
				st.Incremental = &incState{}
			}
			st.Incremental.Tables = append(st.Incremental.Tables, added...)
			if err := s.writeState(ctx, st); err != nil {
				return err
			}
			s.log.Info("cdc/postgres: tables added since the initial snapshot; taking incremental snapshots of them", "tables", added)
		}
	}
	sl, err := s.slotInfo(ctx, conn)
	if err != nil {
		return err
	}
	rc, err := s.connConfig(true)
	if err != nil {
		return &fatal{err}
	}
	repl, err := pgconn.ConnectConfig(ctx, rc)
	if err != nil {
		return refused(fmt.Errorf("connecting for replication: %w", err))
	}
	defer repl.Close(context.WithoutCancel(ctx))

	start := sl.confirmed
	snapshotted := false
	switch {
	case done && st.Snapshot == "done" && !sl.exists:
		return fatalf("the slot %s is gone, though its snapshot was taken: the changes since its last acknowledged position may be lost. "+
			"To start over, capture with a new slot (a new snapshot) or delete the slot's record from %s", s.cfg.Slot, s.cfg.StateTopic)
	case done && st.Snapshot == "done":
		// Streaming, from where the server has the slot.
	case !sl.exists:
		res, err := pglogrepl.CreateReplicationSlot(ctx, repl, s.cfg.Slot, "pgoutput",
			pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "EXPORT_SNAPSHOT"})
		if err != nil {
			return fmt.Errorf("creating the slot %s: %w", s.cfg.Slot, err)
		}
		if start, err = pglogrepl.ParseLSN(res.ConsistentPoint); err != nil {
			return err
		}
		s.log.Info("cdc/postgres: created the slot; taking the initial snapshot", "at", start)
		if err := s.snapshot(ctx, conn, keys, res.SnapshotName, start); err != nil {
			return err
		}
		snapshotted = true
	default:
		// The slot is there but its snapshot did not finish (the source
		// stopped during it). Its WAL starts where the first snapshot was
		// taken: a new snapshot, taken now but placed there, and every
		// change since streamed over it, end in the database's state.
		s.log.Warn("cdc/postgres: the initial snapshot did not finish; taking it again", "at", start)
		if err := s.snapshot(ctx, conn, keys, "", start); err != nil {
			return err
		}
		snapshotted = true
	}
	if !(done && st.Snapshot == "done") {
		names := make([]string, len(s.tables))
		for i, t := range s.tables {
			names[i] = t.String()
		}
		st = state{Slot: s.cfg.Slot, Snapshot: "done", At: start.String(), Tables: names}
		if err := s.writeState(ctx, st); err != nil {
			return err
		}
	}
	// The server keeps a slot's confirmed position in memory and writes
	// it to disk only now and then: after the database restarts, the slot
	// may be back where it was long before. The source's own record of what
	// Kafka acknowledged, in the state topic, is then further on: what is
	// before it is passed over rather than written again.
	skip := start
	if acked, err := pglogrepl.ParseLSN(st.Acked); err == nil && acked > skip {
		s.log.Info("cdc/postgres: the slot is behind what Kafka has; passing over the transactions before the source's record", "slot", start, "record", acked)
		skip = acked
	}
	prevEnd := skip
	if snapshotted {
		prevEnd = 0
	}
	return s.stream(ctx, repl, conn, keys, st, skip, prevEnd)
}

func containsString(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// snapshot writes every row of the tables, as of the exported snapshot
// (or, without one, of a new repeatable-read transaction), as read events
// at position at, and waits for Kafka to acknowledge them all.
func (s *Source) snapshot(ctx context.Context, conn *pgx.Conn, keys map[tableName][]string, snapshotName string, at pglogrepl.LSN) error {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only
	if snapshotName != "" {
		if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT "+quoteLiteral(snapshotName)); err != nil {
			return fmt.Errorf("using the slot's snapshot: %w", err)
		}
	}
	var db string
	var xid int64
	if err := tx.QueryRow(ctx, "SELECT current_database(), txid_current()").Scan(&db, &xid); err != nil {
		return err
	}
	acks := newAcks()
	tr := acks.begin()
	now := time.Now()
	var n int64
	// Debezium marks the snapshot's first event "first", its last "last",
	// and each table's first and last "first_in_data_collection" and
	// "last_in_data_collection" (in this order of precedence): an event is
	// written when the next one is read, to know which it is.
	var pending *event
	var pendingFirst, pendingFirstInTable bool
	flush := func(lastInTable, last bool) {
		if pending == nil {
			return
		}
		switch {
		case last:
			pending.marker = "last"
		case pendingFirst:
			pending.marker = "first"
		case lastInTable:
			pending.marker = "last_in_data_collection"
		case pendingFirstInTable:
			pending.marker = "first_in_data_collection"
		default:
			pending.marker = "true"
		}
		s.produce(ctx, acks, tr, pending.record(s.cfg.TopicPrefix, s.run))
		pending = nil
	}
	for _, tn := range s.tables {
		rr := conn.PgConn().ExecParams(ctx, "SELECT * FROM "+tn.ident(), nil, nil, nil, []int16{0})
		fds := rr.FieldDescriptions()
		t := s.newTable(tn, keys[tn])
		for _, fd := range fds {
			t.cols = append(t.cols, column{name: fd.Name, oid: fd.DataTypeOID, typmod: fd.TypeModifier, key: containsString(t.keys, fd.Name),
				conv: s.run.conv.resolve(fd.DataTypeOID, fd.TypeModifier, true)})
		}
		rows := n
		for rr.NextRow() {
			cells := rowCells(rr.Values())
			flush(pending != nil && pending.t != t, false)
			pending = &event{op: 'r', t: t, after: cells, db: db, snapshot: true, lsn: at, xid: uint32(xid), ts: now}
			pendingFirst, pendingFirstInTable = n == 0, n == rows
			n++
		}
		if _, err := rr.Close(); err != nil {
			return fmt.Errorf("reading %s: %w", tn, err)
		}
		s.log.Info("cdc/postgres: snapshot of a table written", "table", tn.String(), "rows", n-rows)
	}
	flush(true, true)
	acks.commit(tr, at)
	if err := s.kc.Flush(ctx); err != nil {
		return err
	}
	if err := acks.failed(); err != nil {
		return &fatal{fmt.Errorf("writing the snapshot to Kafka: %w", err)}
	}
	s.snapshotted.Add(n)
	return nil
}

func quoteLiteral(s string) string {
	out := []byte{'\''}
	for i := 0; i < len(s); i++ {
		if s[i] == '\'' {
			out = append(out, '\'')
		}
		out = append(out, s[i])
	}
	return string(append(out, '\''))
}

// produce writes a record, counted against its transaction until Kafka
// acknowledges it.
func (s *Source) produce(ctx context.Context, a *acks, t *txnAck, r *kgo.Record) {
	a.add(t)
	s.kc.Produce(ctx, r, func(_ *kgo.Record, err error) { a.done(t, err) })
}

// stream reads the slot's changes from start and writes them to Kafka.
//
// prevEnd is where the transaction before the first streamed one ended, as
// far as the source knows (0 after a new snapshot, as with Debezium): the
// first element of the events' sequence.
func (s *Source) stream(ctx context.Context, repl *pgconn.PgConn, conn *pgx.Conn, keys map[tableName][]string, rec state, start, prevEnd pglogrepl.LSN) error {
	err := pglogrepl.StartReplication(ctx, repl, s.cfg.Slot, 0, pglogrepl.StartReplicationOptions{
		Mode:       pglogrepl.LogicalReplication,
		PluginArgs: []string{"proto_version '1'", "publication_names " + quoteLiteral(s.cfg.Publication)},
	})
	if err != nil {
		return fmt.Errorf("starting replication from the slot %s: %w", s.cfg.Slot, err)
	}
	var db string
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
		return err
	}
	acks := newAcks()
	acks.flushed = start
	s.log.Info("cdc/postgres: streaming", "from", start)
	st := &streamState{s: s, conn: conn, keys: keys, db: db, acks: acks, relations: map[uint32]*table{}, prevEnd: prevEnd, skipBelow: start,
		inc: rec.Incremental.copy()}
	s.incTables.Store(int64(st.incTableCount()))
	if st.inc != nil && len(st.inc.Tables) > 0 {
		if err := st.nextChunk(ctx); err != nil {
			return err
		}
	}
	recorded := start
	// However the session ends, what Kafka has acknowledged is reported,
	// unless the connection is gone: pgconn closes a broken one in a
	// goroutine of its own, which a write now would race with.
	defer func() {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if s.kc.Flush(fctx) == nil && !repl.IsClosed() {
			s.status(fctx, repl, acks)
		}
	}()
	next := time.Now().Add(s.cfg.StatusInterval)
	var beat time.Time // the next heartbeat
	if s.cfg.HeartbeatInterval > 0 {
		beat = time.Now().Add(s.cfg.HeartbeatInterval)
	}
	for {
		if err := acks.failed(); err != nil {
			return &fatal{fmt.Errorf("writing a change to Kafka: %w", err)}
		}
		if !beat.IsZero() && !time.Now().Before(beat) {
			if err := s.heartbeat(ctx, conn, acks); err != nil {
				return err
			}
			beat = time.Now().Add(s.cfg.HeartbeatInterval)
		}
		if !time.Now().Before(next) {
			if err := s.status(ctx, repl, acks); err != nil {
				return err
			}
			lsn := acks.position()
			if st.committed(&rec, lsn) || lsn > recorded {
				recorded, rec.Acked = lsn, lsn.String()
				s.recordState(ctx, rec, acks)
			}
			next = time.Now().Add(s.cfg.StatusInterval)
		}
		wake := next
		if !beat.IsZero() && beat.Before(wake) {
			wake = beat
		}
		rctx, cancel := context.WithDeadline(ctx, wake)
		msg, err := repl.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if pgconn.Timeout(err) {
				continue
			}
			return fmt.Errorf("receiving from the slot: %w", err)
		}
		switch m := msg.(type) {
		case *pgproto3.CopyData:
			if len(m.Data) == 0 {
				continue
			}
			switch m.Data[0] {
			case pglogrepl.PrimaryKeepaliveMessageByteID:
				k, err := pglogrepl.ParsePrimaryKeepaliveMessage(m.Data[1:])
				if err != nil {
					return err
				}
				if !st.inTxn {
					acks.idle(k.ServerWALEnd)
				}
				if k.ReplyRequested {
					next = time.Now()
				}
			case pglogrepl.XLogDataByteID:
				x, err := pglogrepl.ParseXLogData(m.Data[1:])
				if err != nil {
					return err
				}
				if err := st.handle(ctx, x); err != nil {
					return err
				}
			}
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("the slot: %w", pgconn.ErrorResponseToPgError(m))
		}
	}
}

// recordState writes the state record, with the acknowledged position,
// without waiting: records of the one-partition state topic stay in order.
func (s *Source) recordState(ctx context.Context, st state, a *acks) {
	v, _ := json.Marshal(st)
	s.kc.Produce(ctx, &kgo.Record{Topic: s.cfg.StateTopic, Partition: 0, Key: []byte(s.cfg.Slot), Value: v}, func(_ *kgo.Record, err error) {
		if err != nil && ctx.Err() == nil {
			a.fail(fmt.Errorf("writing the state to %s: %w", s.cfg.StateTopic, err))
		}
	})
}

// status tells the server how far Kafka has acknowledged. When nothing is
// waiting for Kafka, that is as far as the server's last keepalive said it
// had sent the slot's WAL (see acks.idle), however little of it was
// captured.
func (s *Source) status(ctx context.Context, repl *pgconn.PgConn, a *acks) error {
	lsn := a.position()
	s.acked.Store(uint64(lsn))
	s.log.Debug("cdc/postgres: acknowledged", "lsn", lsn)
	return pglogrepl.SendStandbyStatusUpdate(ctx, repl, pglogrepl.StandbyStatusUpdate{WALWritePosition: lsn, WALFlushPosition: lsn, WALApplyPosition: lsn})
}

// heartbeat runs the heartbeat's action query, if any, and writes the
// heartbeat record, as Debezium's Heartbeat does.
func (s *Source) heartbeat(ctx context.Context, conn *pgx.Conn, a *acks) error {
	if q := s.cfg.HeartbeatActionQuery; q != "" {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("the heartbeat's action query: %w", err)
		}
	}
	key := appendString([]byte(`{"serverName":`), []byte(s.cfg.TopicPrefix))
	key = append(key, '}')
	now := time.Now()
	value := strconv.AppendInt([]byte(`{"ts_ms":`), now.UnixMilli(), 10)
	value = append(value, '}')
	s.kc.Produce(ctx, &kgo.Record{Topic: s.heartbeatTopic(), Key: key, Value: value, Timestamp: now}, func(_ *kgo.Record, err error) {
		if err != nil && ctx.Err() == nil {
			a.fail(fmt.Errorf("writing a heartbeat to %s: %w", s.heartbeatTopic(), err))
		}
	})
	return nil
}

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
			b = appendString(b, []byte(p.key))
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
	b = appendString(b, []byte(prefix))
	us := ev.ts.UnixMicro()
	b = append(b, `,"ts_ms":`...)
	b = strconv.AppendInt(b, us/1000, 10)
	b = append(b, `,"snapshot":`...)
	if ev.snapshot {
		b = appendString(b, []byte(ev.marker))
	} else {
		b = append(b, `"false"`...)
	}
	b = append(b, `,"db":`...)
	b = appendString(b, []byte(ev.db))
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
	b = appendString(b, []byte(ev.t.name.schema))
	b = append(b, `,"table":`...)
	b = appendString(b, []byte(ev.t.name.name))
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

// refused makes an error of connecting fatal when the server refused the
// source — a password, a pg_hba.conf rule, a role without LOGIN or
// REPLICATION (SQLSTATE class 28), a certificate that does not verify —
// which reconnecting would not cure.
func refused(err error) error {
	var (
		pe        *pgconn.PgError
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
	)
	switch {
	case errors.As(err, &pe) && strings.HasPrefix(pe.Code, "28"):
		return &fatal{fmt.Errorf("the database refused the connection: %w", err)}
	case errors.As(err, &unknownCA), errors.As(err, &hostname), errors.As(err, &invalid):
		return &fatal{fmt.Errorf("the database's certificate did not verify (sslrootcert in the DSN): %w", err)}
	}
	return err
}
