package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine/kafkasec"
	"github.com/oxbow-dev/oxbow/internal/javajson"
)

// Config says what a Source captures and where it writes it.
type Config struct {
	// DSN is the database's connection string (a URL or key=value pairs,
	// as pgx reads them). Its user needs the REPLICATION attribute, SELECT
	// on the tables and, to create the publication, their ownership. TLS
	// is the DSN's too: sslmode=verify-full, sslrootcert, sslcert, sslkey.
	DSN string
	// PasswordFile, if set, holds the user's password (read at each
	// connection, so that a rotated one is used by the next), rather than
	// the DSN, $PGPASSWORD or a passfile. A password the server refuses,
	// or a certificate that does not verify, ends Run with an error saying
	// so (no reconnecting).
	PasswordFile string
	// Tables are the captured tables, "schema.table" or "table" (schema
	// public). Each needs a primary key: it is the records' key.
	Tables []string
	// Slot is the logical replication slot's name (lower-case letters,
	// digits and underscores). It is created, with an initial snapshot,
	// if it does not exist. The slot keeps the server's WAL until the
	// source has acknowledged it: drop it (pg_drop_replication_slot) when
	// a source is retired.
	Slot string
	// Publication names the publication of the tables; default: Slot. It is
	// created if missing, and given the tables it lacks.
	Publication string
	// TopicPrefix names the topics, as Debezium's topic.prefix does: the
	// changes of schema.table go to "<TopicPrefix>.<schema>.<table>".
	TopicPrefix string
	// Brokers are Kafka's seed brokers, KafkaSecurity how to reach them
	// when they are secured, and KafkaOptions more options for the client.
	Brokers       []string
	KafkaSecurity kafkasec.Config
	KafkaOptions  []kgo.Opt
	// Partitions is the partition count of the topics the source creates
	// when they are missing; default 1. Records are partitioned by their
	// key's bytes, as Kafka's Java producer does.
	Partitions int32
	// StateTopic keeps, per slot, whether the initial snapshot is complete;
	// default "<TopicPrefix>.oxbow-cdc-state". It is created compacted.
	StateTopic string
	// StatusInterval is how often the source tells the server how far
	// Kafka has acknowledged; default 10s. The server drops a connection
	// that says nothing for wal_sender_timeout (60s by default).
	StatusInterval time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger

	// Debezium's PostgreSQL connector options that change the events, by
	// their Debezium names and values; the zero value of each is
	// Debezium's default.

	// DecimalHandlingMode is decimal.handling.mode, how numeric and money
	// columns are written: "precise" (the default: the unscaled value's
	// bytes in base64, and for a numeric without a scale an object of
	// "scale" and "value"; NaN as null), "double" (a JSON number, NaN and
	// the infinities as strings) or "string" (the digits as a string).
	DecimalHandlingMode string
	// TimePrecisionMode is time.precision.mode: "adaptive" (the default:
	// time and timestamp in milliseconds for a precision of 0 to 3, in
	// microseconds above), "adaptive_time_microseconds" (time always in
	// microseconds) or "connect" (always milliseconds).
	TimePrecisionMode string
	// IntervalHandlingMode is interval.handling.mode: "numeric" (the
	// default: microseconds, a month counted as 30.4375 days) or "string"
	// (ISO 8601, as P1Y2M3DT4H5M6.78S).
	IntervalHandlingMode string
	// BinaryHandlingMode is binary.handling.mode, how bytea is written:
	// "bytes" (the default: base64, as the JSON converter writes bytes),
	// "base64", "base64-url-safe" or "hex".
	BinaryHandlingMode string
	// HstoreHandlingMode is hstore.handling.mode: "json" (the default: a
	// string holding a JSON object) or "map" (the object itself).
	HstoreHandlingMode string
	// SkippedOperations is skipped.operations, the operations not
	// written, a comma-separated list of c (inserts), u (updates), d
	// (deletes) and t (truncates), or "none"; default "t", as with
	// Debezium: truncates are not written unless asked for.
	SkippedOperations string
	// NoTombstones is tombstones.on.delete=false: a delete is not
	// followed by its tombstone (a topic that is not compacted needs none).
	NoTombstones bool
	// ProvideTransactionMetadata is provide.transaction.metadata: each
	// transaction's BEGIN and END (with its events' counts) are written to
	// the topic "<TopicPrefix>.transaction", and each event has a
	// "transaction" block: the transaction's id and the event's order in
	// it, in all and within its table.
	ProvideTransactionMetadata bool
	// HeartbeatInterval is heartbeat.interval.ms: how often a heartbeat is
	// written to the topic "__debezium-heartbeat.<TopicPrefix>" (keyed by
	// the prefix as Debezium's serverName, with the time in ts_ms); 0, the
	// default, writes none. Whether or not there are heartbeats, when
	// nothing is waiting for Kafka the source acknowledges the position
	// the server says it has sent, so that a slot whose tables are idle,
	// or whose database's other tables are busy, does not hold back the
	// server's WAL.
	HeartbeatInterval time.Duration
	// HeartbeatActionQuery is heartbeat.action.query: a statement run on
	// the database at each heartbeat (say, an update of a captured table
	// kept for it), for a database whose own WAL is otherwise idle.
	HeartbeatActionQuery string
	// SignalDataCollection is signal.data.collection: the signal table,
	// "schema.table", made as Debezium's, (id varchar(42) PRIMARY KEY,
	// type varchar(32) NOT NULL, data varchar(2048)). With it, a row
	// ('<id>', 'execute-snapshot', '{"data-collections": ["public.t"]}')
	// takes an incremental snapshot of the tables it names, chunked by
	// primary key while streaming goes on; so does a table added to Tables
	// after the initial snapshot, without a new slot. The source writes the
	// windows of its chunks into the table (Debezium's insert_insert
	// watermarks); it is added to the publication, and its own changes are
	// written only if it is one of Tables.
	SignalDataCollection string
	// IncludeUnknownDatatypes is include.unknown.datatypes: columns of the
	// types Debezium's connector has no conversion for (geometric types
	// but point, tsquery, pg_lsn, txid_snapshot, composites, arrays of
	// money, interval, xml, name, point and varbit, extensions' types but
	// hstore, citext, ltree, isbn and PostGIS's and pgvector's) are written
	// as their text's bytes, by BinaryHandlingMode; by default they are
	// left out of the events, as Debezium leaves them.
	IncludeUnknownDatatypes bool
	// IncrementalSnapshotChunkSize is incremental.snapshot.chunk.size, the
	// rows of an incremental snapshot's chunk; default 1024. A chunk is
	// written when its window's close comes through the stream, which is
	// once the server has flushed it (with synchronous_commit=off, up to
	// wal_writer_delay later): chunks go at most that fast.
	IncrementalSnapshotChunkSize int
}

// options are a Config's Debezium options, checked.
type options struct {
	decimal, time, interval, binary, hstore string
	skip                                    map[byte]bool
	unknown                                 bool // include.unknown.datatypes
}

func (c Config) options() (options, error) {
	o := options{skip: map[byte]bool{}, unknown: c.IncludeUnknownDatatypes}
	pick := func(name, v string, values ...string) (string, error) {
		if v == "" {
			return values[0], nil
		}
		for _, x := range values {
			if strings.EqualFold(v, x) {
				return x, nil
			}
		}
		return "", fmt.Errorf("cdc/postgres: Config.%s %q: want one of %s", name, v, strings.Join(values, ", "))
	}
	var err error
	if o.decimal, err = pick("DecimalHandlingMode", c.DecimalHandlingMode, "precise", "double", "string"); err != nil {
		return o, err
	}
	if o.time, err = pick("TimePrecisionMode", c.TimePrecisionMode, "adaptive", "adaptive_time_microseconds", "connect"); err != nil {
		return o, err
	}
	if o.interval, err = pick("IntervalHandlingMode", c.IntervalHandlingMode, "numeric", "string"); err != nil {
		return o, err
	}
	if o.binary, err = pick("BinaryHandlingMode", c.BinaryHandlingMode, "bytes", "base64", "base64-url-safe", "hex"); err != nil {
		return o, err
	}
	if o.hstore, err = pick("HstoreHandlingMode", c.HstoreHandlingMode, "json", "map"); err != nil {
		return o, err
	}
	ops := c.SkippedOperations
	if ops == "" {
		ops = "t"
	}
	if !strings.EqualFold(strings.TrimSpace(ops), "none") {
		for op := range strings.SplitSeq(ops, ",") {
			op = strings.TrimSpace(op)
			if len(op) != 1 || !strings.Contains("cudt", op) {
				return o, fmt.Errorf("cdc/postgres: Config.SkippedOperations %q: want c, u, d and t, comma-separated, or none", c.SkippedOperations)
			}
			o.skip[op[0]] = true
		}
	}
	return o, nil
}

var slotName = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// Source captures tables of a PostgreSQL database by logical replication
// and writes their changes to Kafka as Debezium change events. Run it;
// Close it when Run has returned.
type Source struct {
	cfg    Config
	log    *slog.Logger
	tables []tableName
	kc     *kgo.Client
	kopts  []kgo.Opt // the Kafka clients': brokers, security, KafkaOptions
	opts   options
	run    *runInfo // the running Run's
	// compacted are the topics whose cleanup.policy compacts.
	compacted map[string]bool

	snapshotted atomic.Int64
	changes     atomic.Int64
	acked       atomic.Uint64
	sessions    atomic.Int64
	incRows     atomic.Int64
	incTables   atomic.Int64
	running     sync.Mutex
}

type tableName struct{ schema, name string }

func (t tableName) String() string { return t.schema + "." + t.name }

func (t tableName) ident() string { return pgx.Identifier{t.schema, t.name}.Sanitize() }

// New checks the configuration and makes a Source, with its Kafka
// client; it connects to nothing yet.
func New(cfg Config) (*Source, error) {
	if cfg.DSN == "" {
		return nil, errors.New("cdc/postgres: Config.DSN is empty")
	}
	if _, err := pgx.ParseConfig(cfg.DSN); err != nil {
		return nil, fmt.Errorf("cdc/postgres: Config.DSN: %w", err)
	}
	if !slotName.MatchString(cfg.Slot) {
		return nil, fmt.Errorf("cdc/postgres: Config.Slot %q: a slot's name is 1 to 63 lower-case letters, digits and underscores", cfg.Slot)
	}
	if cfg.Publication == "" {
		cfg.Publication = cfg.Slot
	}
	if cfg.TopicPrefix == "" {
		return nil, errors.New("cdc/postgres: Config.TopicPrefix is empty")
	}
	if len(cfg.Brokers) == 0 {
		return nil, errors.New("cdc/postgres: Config.Brokers is empty")
	}
	if len(cfg.Tables) == 0 {
		return nil, errors.New("cdc/postgres: Config.Tables is empty")
	}
	if cfg.Partitions == 0 {
		cfg.Partitions = 1
	}
	if cfg.Partitions < 0 {
		return nil, fmt.Errorf("cdc/postgres: Config.Partitions %d", cfg.Partitions)
	}
	if cfg.StateTopic == "" {
		cfg.StateTopic = cfg.TopicPrefix + ".oxbow-cdc-state"
	}
	if cfg.HeartbeatInterval < 0 {
		return nil, fmt.Errorf("cdc/postgres: Config.HeartbeatInterval %v", cfg.HeartbeatInterval)
	}
	if cfg.HeartbeatActionQuery != "" && cfg.HeartbeatInterval == 0 {
		return nil, errors.New("cdc/postgres: Config.HeartbeatActionQuery without a HeartbeatInterval")
	}
	if cfg.IncrementalSnapshotChunkSize < 0 {
		return nil, fmt.Errorf("cdc/postgres: Config.IncrementalSnapshotChunkSize %d", cfg.IncrementalSnapshotChunkSize)
	}
	if cfg.IncrementalSnapshotChunkSize == 0 {
		cfg.IncrementalSnapshotChunkSize = 1024
	}
	if cfg.StatusInterval <= 0 {
		cfg.StatusInterval = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	o, err := cfg.options()
	if err != nil {
		return nil, err
	}
	s := &Source{cfg: cfg, opts: o, log: cfg.Logger.With("slot", cfg.Slot)}
	seen := map[tableName]bool{}
	for _, t := range cfg.Tables {
		schema, name, ok := strings.Cut(t, ".")
		if !ok {
			schema, name = "public", t
		}
		if schema == "" || name == "" || strings.Contains(name, ".") {
			return nil, fmt.Errorf("cdc/postgres: Config.Tables: %q is not schema.table", t)
		}
		tn := tableName{schema, name}
		if !seen[tn] {
			seen[tn] = true
			s.tables = append(s.tables, tn)
		}
	}
	if s.kopts, err = cfg.KafkaSecurity.ClientOpts(cfg.Brokers, cfg.KafkaOptions...); err != nil {
		return nil, fmt.Errorf("cdc/postgres: Config.KafkaSecurity: %w", err)
	}
	kc, err := kgo.NewClient(append(slices.Clone(s.kopts),
		// Every change is acknowledged by all in-sync replicas before the
		// server hears of it, and written once per attempt (idempotence).
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(5*time.Millisecond))...)
	if err != nil {
		return nil, fmt.Errorf("cdc/postgres: the Kafka client: %w", err)
	}
	s.kc = kc
	return s, nil
}

// Topic is the topic of a table's changes.
func (s *Source) Topic(table string) string {
	schema, name, ok := strings.Cut(table, ".")
	if !ok {
		schema, name = "public", table
	}
	return s.cfg.TopicPrefix + "." + schema + "." + name
}

// Stats are a source's counts since it was made.
type Stats struct {
	// SnapshotRows are the rows of initial snapshots written to Kafka;
	// Changes the streamed change events Kafka has acknowledged.
	SnapshotRows, Changes int64
	// Acknowledged is how far in the WAL everything is in Kafka: the
	// position last reported to the server as flushed.
	Acknowledged pglogrepl.LSN
	// Sessions counts the connections made to the database's replication
	// stream (more than one: it reconnected).
	Sessions int64
	// IncrementalRows are the rows of incremental snapshots written (Kafka
	// may not have them all yet); IncrementalTables the tables whose
	// incremental snapshots are to be taken or under way.
	IncrementalRows   int64
	IncrementalTables int
}

// Stats returns the source's counts.
func (s *Source) Stats() Stats {
	return Stats{SnapshotRows: s.snapshotted.Load(), Changes: s.changes.Load(), Acknowledged: pglogrepl.LSN(s.acked.Load()), Sessions: s.sessions.Load(),
		IncrementalRows: s.incRows.Load(), IncrementalTables: int(s.incTables.Load())}
}

// fatal is an error that reconnecting does not cure.
type fatal struct{ err error }

func (f *fatal) Error() string { return f.err.Error() }
func (f *fatal) Unwrap() error { return f.err }

func fatalf(format string, args ...any) error { return &fatal{fmt.Errorf(format, args...)} }

// Run captures the tables until ctx is done: it makes the topics, the
// publication and the slot if missing, writes the initial snapshot once,
// then streams the changes, acknowledging WAL positions to the server only
// once Kafka has acknowledged every change up to them. When the database
// goes away (a restart, a dropped connection) it reconnects, with backoff,
// and goes on from the last acknowledged position: what Kafka had not
// acknowledged is written again (duplicates, which keep their positions,
// see cdc.Position). It returns nil when ctx is done, or an error that
// reconnecting would not cure (a Kafka write that failed, a lost slot, a
// table without a primary key).
func (s *Source) Run(ctx context.Context) error {
	if !s.running.TryLock() {
		return errors.New("cdc/postgres: Run is already running")
	}
	defer s.running.Unlock()
	s.run = newRunInfo(s.cfg.TopicPrefix, s.opts)
	if err := kafkasec.Check(ctx, s.kc); err != nil {
		return fmt.Errorf("cdc/postgres: %w", err)
	}
	if err := s.ensureTopics(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	backoff := 200 * time.Millisecond
	for {
		start := time.Now()
		err := s.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		var f *fatal
		if errors.As(err, &f) {
			return fmt.Errorf("cdc/postgres: %w", f.err)
		}
		if time.Since(start) > time.Minute {
			backoff = 200 * time.Millisecond
		}
		s.log.Warn("cdc/postgres: the session with the database ended; reconnecting", "err", err, "after", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// publish is a publication's publish option for the skipped operations,
// when they were set explicitly ("" otherwise: everything is published).
func (o options) publish(explicit string) string {
	if explicit == "" || len(o.skip) == 0 {
		return ""
	}
	var ops []string
	for _, op := range []struct {
		c    byte
		name string
	}{{'c', "insert"}, {'u', "update"}, {'d', "delete"}, {'t', "truncate"}} {
		if !o.skip[op.c] {
			ops = append(ops, op.name)
		}
	}
	return strings.Join(ops, ",")
}

// skips reports whether an event is left out by the options: an operation
// in SkippedOperations (the delete and the create of a primary-key change
// each by its own, a tombstone with its delete), or a tombstone with
// NoTombstones.
func (s *Source) skips(ev event) bool {
	if ev.tombstone {
		return s.cfg.NoTombstones || s.opts.skip['d']
	}
	return s.opts.skip[ev.op]
}

// runInfo is what the events of one Run share: the headers Debezium puts
// on every record, and the conversions.
type runInfo struct {
	headers []kgo.RecordHeader
	conv    *converter
}

// newRunInfo makes a run's headers, with a new run id (a UUIDv7, as
// Debezium's engine makes one each time it starts).
func newRunInfo(prefix string, o options) *runInfo {
	var id [16]byte
	_, _ = rand.Read(id[:])
	ms := uint64(time.Now().UnixMilli())
	for i := range 6 {
		id[i] = byte(ms >> (40 - 8*i))
	}
	id[6] = id[6]&0x0f | 0x70
	id[8] = id[8]&0x3f | 0x80
	h := hex.EncodeToString(id[:])
	uuid := h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
	str := func(v string) []byte { return javajson.AppendString(nil, []byte(v)) }
	return &runInfo{
		headers: []kgo.RecordHeader{
			{Key: "__debezium.context.connectorLogicalName", Value: str(prefix)},
			{Key: "__debezium.context.taskId", Value: str("0")},
			{Key: "__debezium.context.connectorName", Value: str("postgresql")},
			{Key: "__debezium.context.runId", Value: str(uuid)},
		},
		conv: newConverter(o),
	}
}

// heartbeatTopic is the heartbeats' topic (Debezium's
// heartbeat.topics.prefix, "__debezium-heartbeat", and the prefix).
func (s *Source) heartbeatTopic() string { return "__debezium-heartbeat." + s.cfg.TopicPrefix }

// txTopic is the transaction metadata's topic.
func (s *Source) txTopic() string { return s.cfg.TopicPrefix + ".transaction" }

// Close closes the Kafka client. Call it after Run has returned.
func (s *Source) Close() { s.kc.Close() }
