package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// Incremental snapshots, as Debezium's (its DBLog-style watermarks with
// the insert_insert strategy): a table is read in chunks of its primary
// key's order while streaming goes on. For each chunk, a row is inserted
// into the signal table to open a window, the chunk is read, and another
// row closes the window. Every streamed change, between the two in the
// stream, of a key the chunk has takes the key out of it: the change is
// newer. When the close comes in the stream, what is left of the chunk is
// written as read events ("snapshot":"incremental"), and the next chunk
// begins. Progress (the last key written) is kept in the state record once
// Kafka has the chunk, so that after a crash the snapshot goes on from
// there.

// afterChunkRead, if set (by a test), runs between a chunk's read and its
// window's close.
var afterChunkRead func()

// incState is an incremental snapshot's progress, in the state record.
type incState struct {
	// Tables are the tables to snapshot; the first one is under way.
	Tables []string `json:"tables"`
	// Last is the key of the last row written of the first table (its
	// columns' text), nil before the first chunk; Max the largest key when
	// its snapshot began (the snapshot ends there), known once Started.
	Last    []string `json:"last,omitempty"`
	Max     []string `json:"max,omitempty"`
	Started bool     `json:"started,omitempty"`
}

func (s *incState) copy() *incState {
	if s == nil {
		return nil
	}
	c := *s
	c.Tables = append([]string(nil), s.Tables...)
	c.Last = append([]string(nil), s.Last...)
	c.Max = append([]string(nil), s.Max...)
	return &c
}

// chunk is the chunk of an incremental snapshot in flight.
type chunk struct {
	window string // its id: the signal rows are <id>-open and <id>-close
	open   bool   // the open row has come in the stream
	t      *table
	rows   map[string][]cell // by key
	order  []string          // the keys in the primary key's order
	last   []string          // the key of its last row
	done   bool              // the table's last chunk
}

// progress is a chunk written, waiting for Kafka to acknowledge it: at end,
// the end of the close row's transaction, the snapshot is at inc, and done
// tables are complete.
type progress struct {
	end  pglogrepl.LSN
	inc  *incState
	done string
}

// signalTable is the signal table's name, if any.
func (s *Source) signalTable() (tableName, bool) {
	if s.cfg.SignalDataCollection == "" {
		return tableName{}, false
	}
	return parseTableName(s.cfg.SignalDataCollection), true
}

func parseTableName(t string) tableName {
	schema, name, ok := strings.Cut(t, ".")
	if !ok {
		schema, name = "public", t
	}
	return tableName{schema, name}
}

// signal handles a row inserted into the signal table: an execute-snapshot
// signal, or a window of the chunk in flight.
func (st *streamState) signal(ctx context.Context, t *table, cells []cell) {
	col := func(name string) string {
		for i, c := range t.cols {
			if c.name == name && i < len(cells) && cells[i].kind == 't' {
				return string(cells[i].text)
			}
		}
		return ""
	}
	id, kind, data := col("id"), col("type"), col("data")
	if c := st.chunk; c != nil {
		switch id {
		case c.window + "-open":
			c.open = true
			return
		case c.window + "-close":
			st.closeWindow(ctx)
			return
		}
	}
	if kind != "execute-snapshot" {
		return
	}
	var req struct {
		Collections []string `json:"data-collections"`
		Type        string   `json:"type"`
	}
	if err := json.Unmarshal([]byte(data), &req); err != nil {
		st.s.log.Warn("cdc/postgres: a signal that does not parse; passed over", "id", id, "data", data, "err", err)
		return
	}
	if req.Type != "" && !strings.EqualFold(req.Type, "incremental") {
		st.s.log.Warn("cdc/postgres: only incremental snapshots are taken on a signal", "id", id, "type", req.Type)
		return
	}
	for _, c := range req.Collections {
		tn := parseTableName(c)
		if !st.s.captures(tn) {
			st.s.log.Warn("cdc/postgres: a snapshot signal names a table the source does not capture; passed over", "id", id, "table", c)
			continue
		}
		st.enqueue(tn.String())
	}
	// Kept in the state record with the signal's transaction: once Kafka
	// has that, the signal is not read again.
	st.pending = append(st.pending, progress{inc: st.inc.copy()})
}

// enqueue adds a table to the incremental snapshot.
func (st *streamState) enqueue(table string) {
	if st.inc == nil {
		st.inc = &incState{}
	}
	if !containsString(st.inc.Tables, table) {
		st.inc.Tables = append(st.inc.Tables, table)
		st.s.incTables.Store(int64(len(st.inc.Tables)))
		st.s.log.Info("cdc/postgres: an incremental snapshot of a table is to be taken", "table", table)
	}
	if st.chunk == nil {
		st.incNext = true
	}
}

// keyOf is the key of a row: its key columns' text.
func keyOf(t *table, cells []cell) string {
	var b strings.Builder
	for i, c := range t.cols {
		if c.key && i < len(cells) {
			b.WriteString(strconv.Itoa(len(cells[i].text)))
			b.WriteByte(':')
			b.Write(cells[i].text)
		}
	}
	return b.String()
}

// streamed takes out of the chunk in flight the key a streamed change has.
func (st *streamState) streamed(ev event) {
	c := st.chunk
	if c == nil || !c.open || ev.t.name != c.t.name || ev.tombstone {
		return
	}
	if ev.op == 't' {
		clear(c.rows)
		return
	}
	cells := ev.keyFrom
	if cells == nil {
		cells = ev.after
		if cells == nil {
			cells = ev.before
		}
	}
	delete(c.rows, keyOf(c.t, cells))
}

// nextChunk reads the next chunk of the incremental snapshot, between its
// window's open and close rows, or finishes tables that have no more.
func (st *streamState) nextChunk(ctx context.Context) error {
	st.incNext = false
	for st.inc != nil && len(st.inc.Tables) > 0 && st.chunk == nil {
		tn := parseTableName(st.inc.Tables[0])
		keys := st.keys[tn] // the session's, as the stream's events have it
		if len(keys) == 0 {
			return fatalf("the table %s has no primary key: it cannot be snapshotted in chunks", tn)
		}
		order := make([]string, len(keys))
		for i, k := range keys {
			order[i] = pgx.Identifier{k}.Sanitize()
		}
		cols := strings.Join(order, ", ")
		if !st.inc.Started {
			desc := make([]string, len(order))
			for i, o := range order {
				desc[i] = o + " DESC"
			}
			max, err := st.textRow(ctx, "SELECT "+cols+" FROM "+tn.ident()+" ORDER BY "+strings.Join(desc, ", ")+" LIMIT 1")
			if err != nil {
				return fmt.Errorf("the largest key of %s: %w", tn, err)
			}
			st.inc.Max, st.inc.Started, st.inc.Last = max, true, nil
			if max == nil { // empty: done, with nothing for Kafka to have
				st.finishTable()
				st.pending = append(st.pending, progress{end: 1, inc: st.inc.copy(), done: st.doneTable})
				st.doneTable = ""
				continue
			}
		}
		var id [8]byte
		_, _ = rand.Read(id[:])
		window := hex.EncodeToString(id[:])
		sig := st.s.cfg.SignalDataCollection
		opened := time.Now().UTC().Format(time.RFC3339Nano)
		if _, err := st.conn.Exec(ctx, "INSERT INTO "+parseTableName(sig).ident()+" (id, type, data) VALUES ($1, 'snapshot-window-open', $2)",
			window+"-open", `{"openWindowTimestamp": "`+opened+`"}`); err != nil {
			return fmt.Errorf("opening a window in the signal table %s: %w", sig, err)
		}
		var conds []string
		var params [][]byte
		if st.inc.Last != nil {
			conds = append(conds, "("+cols+") > ("+placeholders(1, len(keys))+")")
			for _, v := range st.inc.Last {
				params = append(params, []byte(v))
			}
		}
		conds = append(conds, "("+cols+") <= ("+placeholders(len(params)+1, len(keys))+")")
		for _, v := range st.inc.Max {
			params = append(params, []byte(v))
		}
		where := " WHERE " + strings.Join(conds, " AND ")
		size := st.s.cfg.IncrementalSnapshotChunkSize
		c := &chunk{window: window, rows: map[string][]cell{}}
		rr := st.conn.PgConn().ExecParams(ctx, "SELECT * FROM "+tn.ident()+where+" ORDER BY "+cols+" LIMIT "+strconv.Itoa(size), params, nil, nil, []int16{0})
		fds := rr.FieldDescriptions()
		c.t = st.s.newTable(tn, keys)
		for _, fd := range fds {
			c.t.cols = append(c.t.cols, column{name: fd.Name, oid: fd.DataTypeOID, typmod: fd.TypeModifier, key: containsString(keys, fd.Name),
				conv: st.s.run.conv.resolve(fd.DataTypeOID, fd.TypeModifier, true)})
		}
		var lastCells []cell
		for rr.NextRow() {
			cells := rowCells(rr.Values())
			k := keyOf(c.t, cells)
			c.rows[k] = cells
			c.order = append(c.order, k)
			lastCells = cells
		}
		if _, err := rr.Close(); err != nil {
			return fmt.Errorf("reading a chunk of %s: %w", tn, err)
		}
		if lastCells != nil {
			for i, col := range c.t.cols {
				if col.key {
					c.last = append(c.last, string(lastCells[i].text))
				}
			}
		}
		c.done = len(c.order) < size || slices.Equal(c.last, st.inc.Max)
		if afterChunkRead != nil {
			afterChunkRead()
		}
		if _, err := st.conn.Exec(ctx, "INSERT INTO "+parseTableName(sig).ident()+" (id, type, data) VALUES ($1, 'snapshot-window-close', $2)",
			window+"-close", `{"openWindowTimestamp": "`+opened+`", "closeWindowTimestamp": "`+time.Now().UTC().Format(time.RFC3339Nano)+`"}`); err != nil {
			return fmt.Errorf("closing a window in the signal table %s: %w", sig, err)
		}
		st.chunk = c
	}
	return nil
}

func placeholders(from, n int) string {
	ps := make([]string, n)
	for i := range ps {
		ps[i] = "$" + strconv.Itoa(from+i)
	}
	return strings.Join(ps, ", ")
}

// textRow reads one row's columns as text; nil if there is none.
func (st *streamState) textRow(ctx context.Context, sql string) ([]string, error) {
	rr := st.conn.PgConn().ExecParams(ctx, sql, nil, nil, nil, []int16{0})
	var out []string
	for rr.NextRow() {
		for _, v := range rr.Values() {
			out = append(out, string(v))
		}
	}
	_, err := rr.Close()
	return out, err
}

// closeWindow writes what is left of the chunk in flight as read events,
// in the transaction of the close row, and notes the progress.
func (st *streamState) closeWindow(ctx context.Context) {
	c := st.chunk
	st.chunk = nil
	for _, k := range c.order {
		cells, ok := c.rows[k]
		if !ok {
			continue
		}
		ev := st.event('r', c.t, 0, nil, cells)
		ev.snapshot, ev.incremental, ev.marker = true, true, "incremental"
		st.emit(ctx, ev)
		st.s.incRows.Add(1)
	}
	if c.done {
		st.finishTable()
	} else {
		st.inc.Last = c.last
	}
	st.pending = append(st.pending, progress{end: 0, inc: st.inc.copy(), done: st.doneTable})
	st.doneTable = ""
	st.incNext = true
	st.s.incTables.Store(int64(st.incTableCount()))
}

func (st *streamState) incTableCount() int {
	if st.inc == nil {
		return 0
	}
	return len(st.inc.Tables)
}

// finishTable ends the first table's snapshot.
func (st *streamState) finishTable() {
	st.s.log.Info("cdc/postgres: the incremental snapshot of a table is complete", "table", st.inc.Tables[0])
	st.doneTable = st.inc.Tables[0]
	st.inc.Tables = st.inc.Tables[1:]
	st.inc.Last, st.inc.Max, st.inc.Started = nil, nil, false
	if len(st.inc.Tables) == 0 {
		st.inc = nil
	}
	st.s.incTables.Store(int64(st.incTableCount()))
}

// committed applies to the state record the progress that Kafka has
// acknowledged all of; it reports whether there was any.
func (st *streamState) committed(rec *state, acked pglogrepl.LSN) bool {
	changed := false
	for len(st.pending) > 0 && st.pending[0].end != 0 && st.pending[0].end <= acked {
		p := st.pending[0]
		st.pending = st.pending[1:]
		rec.Incremental = p.inc
		if p.done != "" && !containsString(rec.Tables, p.done) {
			rec.Tables = append(rec.Tables, p.done)
		}
		changed = true
	}
	return changed
}
