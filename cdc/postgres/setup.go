package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine/kafkasec"
)

// ensureTopics creates the tables' topics and the state topic when missing.
func (s *Source) ensureTopics(ctx context.Context) error {
	adm := kadm.NewClient(s.kc)
	var topics []string
	for _, t := range s.tables {
		topics = append(topics, s.Topic(t.String()))
	}
	if s.cfg.ProvideTransactionMetadata {
		topics = append(topics, s.txTopic())
	}
	if s.cfg.HeartbeatInterval > 0 {
		topics = append(topics, s.heartbeatTopic())
	}
	create := func(partitions int32, configs map[string]*string, topics ...string) error {
		res, err := adm.CreateTopics(ctx, partitions, -1, configs, topics...)
		if err != nil {
			return fmt.Errorf("cdc/postgres: creating the topics %v: %w", topics, err)
		}
		for _, r := range res.Sorted() {
			if r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
				return fmt.Errorf("cdc/postgres: creating the topic %s: %w", r.Topic, r.Err)
			}
		}
		return nil
	}
	if err := create(s.cfg.Partitions, nil, topics...); err != nil {
		return err
	}
	// A truncate goes to a compacted topic with a key (see event.record).
	// A topic just made may not be known to every broker yet.
	var rcs kadm.ResourceConfigs
	deadline := time.Now().Add(30 * time.Second)
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		var err error
		if rcs, err = adm.DescribeTopicConfigs(ctx, topics...); err != nil {
			return fmt.Errorf("cdc/postgres: reading the topics' configurations: %w", err)
		}
		unknown := false
		for _, rc := range rcs {
			unknown = unknown || errors.Is(rc.Err, kerr.UnknownTopicOrPartition)
		}
		if !unknown || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
	}
	s.compacted = map[string]bool{}
	for _, rc := range rcs {
		if rc.Err != nil {
			return fmt.Errorf("cdc/postgres: reading the configuration of %s: %w", rc.Name, rc.Err)
		}
		for _, c := range rc.Configs {
			if c.Key == "cleanup.policy" && c.Value != nil && strings.Contains(*c.Value, "compact") {
				s.compacted[rc.Name] = true
			}
		}
	}
	compact := "compact"
	return create(1, map[string]*string{"cleanup.policy": &compact}, s.cfg.StateTopic)
}

// state is what the state topic keeps for a slot.
type state struct {
	Slot string `json:"slot"`
	// Snapshot is "done" once every row of the initial snapshot is in
	// Kafka; At is the position it was taken at, Tables the tables it has.
	Snapshot string   `json:"snapshot"`
	At       string   `json:"at"`
	Tables   []string `json:"tables"`
	// Acked is how far in the WAL Kafka had acknowledged everything when
	// the record was written.
	Acked string `json:"acked,omitempty"`
	// Incremental is the incremental snapshot under way, if any.
	Incremental *incState `json:"incremental,omitempty"`
}

// readState reads the slot's last state record, if any.
func (s *Source) readState(ctx context.Context) (state, bool, error) {
	adm := kadm.NewClient(s.kc)
	var end kadm.ListedOffset
	// A topic just created may take a moment to be in every broker's
	// metadata.
	for attempt := 0; ; attempt++ {
		ends, err := adm.ListEndOffsets(ctx, s.cfg.StateTopic)
		if err != nil {
			return state{}, false, fmt.Errorf("the end of %s: %w", s.cfg.StateTopic, err)
		}
		var ok bool
		end, ok = ends.Lookup(s.cfg.StateTopic, 0)
		if ok && end.Err == nil {
			break
		}
		if attempt == 50 {
			return state{}, false, fmt.Errorf("the end of %s: %v", s.cfg.StateTopic, errors.Join(end.Err, errors.New("no partition 0")))
		}
		select {
		case <-ctx.Done():
			return state{}, false, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if end.Offset == 0 {
		return state{}, false, nil
	}
	cl, err := kgo.NewClient(append(slices.Clone(s.kopts),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{s.cfg.StateTopic: {0: kgo.NewOffset().AtStart()}}))...)
	if err != nil {
		return state{}, false, err
	}
	defer cl.Close()
	var last state
	found := false
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return state{}, false, err
		}
		for _, fe := range fs.Errors() {
			return state{}, false, fmt.Errorf("cdc/postgres: reading %s: %w", s.cfg.StateTopic, fe.Err)
		}
		done := false
		fs.EachRecord(func(r *kgo.Record) {
			if string(r.Key) == s.cfg.Slot {
				var st state
				if r.Value == nil {
					last, found = state{}, false
				} else if json.Unmarshal(r.Value, &st) == nil {
					last, found = st, true
				}
			}
			if r.Offset >= end.Offset-1 {
				done = true
			}
		})
		if done {
			return last, found, nil
		}
	}
}

// writeState writes the slot's state record and waits for Kafka.
func (s *Source) writeState(ctx context.Context, st state) error {
	v, _ := json.Marshal(st)
	if err := s.kc.ProduceSync(ctx, &kgo.Record{Topic: s.cfg.StateTopic, Partition: 0, Key: []byte(s.cfg.Slot), Value: v}).FirstErr(); err != nil {
		return &fatal{fmt.Errorf("writing the state to %s: %w", s.cfg.StateTopic, err)}
	}
	return nil
}

// table is a captured table as the source knows it.
type table struct {
	name      tableName
	topic     string
	cols      []column
	keys      []string // the primary key's columns, in the key's order
	compacted bool     // the topic's cleanup.policy compacts
	captured  bool     // its changes are written (not so the signal table, unless captured too)
	signal    bool     // the signal table
}

func (s *Source) newTable(tn tableName, keys []string) *table {
	topic := s.Topic(tn.String())
	sig, ok := s.signalTable()
	return &table{name: tn, topic: topic, keys: keys, compacted: s.compacted[topic], captured: s.captures(tn), signal: ok && sig == tn}
}

// primaryKey reads a table's primary key columns.
func primaryKey(ctx context.Context, conn *pgx.Conn, t tableName) ([]string, error) {
	rows, err := conn.Query(ctx, `
		SELECT a.attname
		FROM pg_index i
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
		WHERE i.indrelid = $1::regclass AND i.indisprimary
		ORDER BY array_position(i.indkey::int2[], a.attnum)`, t.ident())
	if err != nil {
		return nil, err
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	return keys, nil
}

// ensurePublication checks the tables, reads their primary keys and makes
// the publication hold them.
func (s *Source) ensurePublication(ctx context.Context, conn *pgx.Conn) (map[tableName][]string, error) {
	keys := map[tableName][]string{}
	for _, t := range s.tables {
		var exists bool
		if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, t.ident()).Scan(&exists); err != nil {
			return nil, err
		}
		if !exists {
			return nil, fatalf("the table %s does not exist", t)
		}
		k, err := primaryKey(ctx, conn, t)
		if err != nil {
			return nil, fmt.Errorf("the primary key of %s: %w", t, err)
		}
		if len(k) == 0 {
			return nil, fatalf("the table %s has no primary key: its changes would have no key to be a table by", t)
		}
		keys[t] = k
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_publication WHERE pubname = $1`, s.cfg.Publication).Scan(&n); err != nil {
		return nil, err
	}
	pub := pgx.Identifier{s.cfg.Publication}.Sanitize()
	var idents []string
	published := s.tables
	if sig, ok := s.signalTable(); ok && !s.captures(sig) {
		// The signal table's rows come through the stream too.
		var exists bool
		if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, sig.ident()).Scan(&exists); err != nil {
			return nil, err
		}
		if !exists {
			return nil, fatalf("the signal table %s does not exist: create it as (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048))", sig)
		}
		published = append(append([]tableName(nil), s.tables...), sig)
	}
	for _, t := range published {
		idents = append(idents, t.ident())
	}
	// Operations skipped by choice are not published, as Debezium has it:
	// the server does not send them (nor a transaction of nothing else).
	with := ""
	if publish := s.opts.publish(s.cfg.SkippedOperations); publish != "" {
		with = " WITH (publish = " + quoteLiteral(publish) + ")"
	}
	if n == 0 {
		if _, err := conn.Exec(ctx, "CREATE PUBLICATION "+pub+" FOR TABLE "+strings.Join(idents, ", ")+with); err != nil {
			return nil, fmt.Errorf("creating the publication %s: %w", s.cfg.Publication, err)
		}
		s.log.Info("cdc/postgres: created the publication", "publication", s.cfg.Publication, "tables", s.tables)
		return keys, nil
	}
	rows, err := conn.Query(ctx, `SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = $1`, s.cfg.Publication)
	if err != nil {
		return nil, err
	}
	have := map[tableName]bool{}
	var schema, name string
	if _, err := pgx.ForEachRow(rows, []any{&schema, &name}, func() error {
		have[tableName{schema, name}] = true
		return nil
	}); err != nil {
		return nil, err
	}
	for _, t := range published {
		if !have[t] {
			if _, err := conn.Exec(ctx, "ALTER PUBLICATION "+pub+" ADD TABLE "+t.ident()); err != nil {
				return nil, fmt.Errorf("adding %s to the publication %s: %w", t, s.cfg.Publication, err)
			}
		}
	}
	if with != "" {
		if _, err := conn.Exec(ctx, "ALTER PUBLICATION "+pub+" SET"+strings.TrimPrefix(with, " WITH")); err != nil {
			return nil, fmt.Errorf("setting what the publication %s publishes: %w", s.cfg.Publication, err)
		}
	}
	return keys, nil
}

// slot is the replication slot as the server has it.
type slot struct {
	exists    bool
	plugin    string
	confirmed pglogrepl.LSN
}

func (s *Source) slotInfo(ctx context.Context, conn *pgx.Conn) (slot, error) {
	var sl slot
	var confirmed *string
	err := conn.QueryRow(ctx, `SELECT plugin, confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, s.cfg.Slot).Scan(&sl.plugin, &confirmed)
	if errors.Is(err, pgx.ErrNoRows) {
		return sl, nil
	}
	if err != nil {
		return sl, err
	}
	sl.exists = true
	if sl.plugin != "pgoutput" {
		return sl, fatalf("the slot %s uses the plugin %q, not pgoutput", s.cfg.Slot, sl.plugin)
	}
	if confirmed != nil {
		if sl.confirmed, err = pglogrepl.ParseLSN(*confirmed); err != nil {
			return sl, err
		}
	}
	return sl, nil
}

// connConfig is the DSN's configuration with the session settings the
// source's conversions assume: UTC and ISO dates.
func (s *Source) connConfig(replication bool) (*pgconn.Config, error) {
	c, err := pgconn.ParseConfig(s.cfg.DSN)
	if err != nil {
		return nil, err
	}
	if s.cfg.PasswordFile != "" {
		p, err := kafkasec.ReadSecret(s.cfg.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("the database password: %w", err)
		}
		c.Password = p.Reveal()
	}
	c.RuntimeParams["timezone"] = "UTC"
	c.RuntimeParams["datestyle"] = "ISO, YMD"
	c.RuntimeParams["intervalstyle"] = "iso_8601"
	c.RuntimeParams["extra_float_digits"] = "3"
	c.RuntimeParams["lc_monetary"] = "C" // money as $1,234.56, whatever the server's locale
	if replication {
		c.RuntimeParams["replication"] = "database"
		c.RuntimeParams["application_name"] = "oxbow-cdc-" + s.cfg.Slot
	}
	return c, nil
}
