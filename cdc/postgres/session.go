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
	"github.com/oxbow-dev/oxbow/internal/javajson"
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
func (s *Source) stream(ctx context.Context, repl *pgconn.PgConn, conn *pgx.Conn, keys map[tableName][]string, rec state, start, prevEnd pglogrepl.LSN) (err error) {
	err = pglogrepl.StartReplication(ctx, repl, s.cfg.Slot, 0, pglogrepl.StartReplicationOptions{
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
	// goroutine of its own, which a write now would race with. A stop
	// then ends the stream as the protocol says (CopyDone, and the
	// server's reply), so that the server has taken in the last position
	// by the time Run returns: closing the connection right after the
	// status left the slot's confirmed position behind it, for a moment
	// or, when the walsender had not read it yet, for good.
	defer func() {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if s.kc.Flush(fctx) != nil || repl.IsClosed() || s.status(fctx, repl, acks) != nil {
			return
		}
		if err != nil {
			return // after a failure the stream's state is not known
		}
		if cerr := endCopy(repl, 10*time.Second); cerr != nil {
			s.log.Warn("cdc/postgres: ending the replication stream", "err", cerr)
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

// endCopy ends a replication stream: CopyDone, then the server's reply up
// to ReadyForQuery, within d. The server reads its input in order, so
// every status sent before has been processed when it returns.
func endCopy(repl *pgconn.PgConn, d time.Duration) error {
	nc := repl.Conn()
	if err := nc.SetDeadline(time.Now().Add(d)); err != nil {
		return err
	}
	defer nc.SetDeadline(time.Time{})
	_, err := pglogrepl.SendStandbyCopyDone(context.Background(), repl)
	return err
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
	key := javajson.AppendString([]byte(`{"serverName":`), []byte(s.cfg.TopicPrefix))
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
