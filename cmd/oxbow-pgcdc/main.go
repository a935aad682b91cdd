// Command oxbow-pgcdc captures tables of a PostgreSQL database by logical
// replication and writes their changes to Kafka as Debezium change events:
// cdc/postgres's Source as a small program, for when the capture should not
// run inside a service.
//
//	oxbow-pgcdc -dsn postgres://cdc@db/shop -tables public.customers,public.orders \
//	    -slot shop_cdc -topic-prefix shop -brokers kafka:9092
//
// Debezium's options that change the events are flags by their Debezium
// names, with Debezium's values and defaults: -decimal.handling.mode,
// -time.precision.mode, -interval.handling.mode, -binary.handling.mode,
// -hstore.handling.mode, -skipped.operations, -tombstones.on.delete,
// -provide.transaction.metadata, -heartbeat.interval (a duration, where
// Debezium's heartbeat.interval.ms is milliseconds), -heartbeat.action.query,
// -signal.data.collection, -incremental.snapshot.chunk.size and
// -include.unknown.datatypes.
//
// For a secured Kafka it takes the flags every Oxbow command takes
// (-kafka-tls, -kafka-tls-ca, -kafka-tls-cert, -kafka-tls-key,
// -kafka-tls-server-name, -kafka-sasl-mechanism, -kafka-sasl-user,
// -kafka-sasl-password-file, -kafka-sasl-token-file, each defaulting to its
// OXBOW_KAFKA_* variable; a password or token can also be given as
// $OXBOW_KAFKA_SASL_PASSWORD or $OXBOW_KAFKA_SASL_TOKEN, never as a flag).
// The database's TLS is in the DSN; its password in -pg-password-file,
// $PGPASSWORD or the DSN.
//
// It runs until SIGINT or SIGTERM, then reports to the server how far Kafka
// has acknowledged and exits 0; it exits 1 on an error that reconnecting
// does not cure, and 2 on bad flags.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/oxbow-dev/oxbow/cdc/postgres"
	"github.com/oxbow-dev/oxbow/engine/kafkasec"
	"github.com/oxbow-dev/oxbow/telemetry"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the command until ctx is done; it returns the exit code.
func run(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("oxbow-pgcdc", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		dsn         = fs.String("dsn", os.Getenv("OXBOW_PG_DSN"), "the database's connection string, TLS in it: sslmode=verify-full&sslrootcert=... (default $OXBOW_PG_DSN)")
		pgPassword  = fs.String("pg-password-file", os.Getenv("OXBOW_PG_PASSWORD_FILE"), "file holding the database user's password, read at each connection (default $OXBOW_PG_PASSWORD_FILE; $PGPASSWORD works too)")
		tables      = fs.String("tables", "", "the tables to capture, comma-separated schema.table")
		slot        = fs.String("slot", "", "the replication slot (created if missing)")
		publication = fs.String("publication", "", "the publication (default: the slot's name)")
		prefix      = fs.String("topic-prefix", "", "topics are <prefix>.<schema>.<table>")
		brokers     = fs.String("brokers", os.Getenv("KAFKA_BROKERS"), "Kafka's seed brokers, comma-separated (default $KAFKA_BROKERS)")
		partitions  = fs.Int("partitions", 1, "partitions of the topics it creates")
		status      = fs.Duration("status-interval", 10*time.Second, "how often to report the acknowledged position to the server")
		verbose     = fs.Bool("v", false, "log at debug level")

		decimal    = fs.String("decimal.handling.mode", "precise", "numeric and money: precise, double or string")
		timePrec   = fs.String("time.precision.mode", "adaptive", "time and timestamp: adaptive, adaptive_time_microseconds or connect")
		interval   = fs.String("interval.handling.mode", "numeric", "interval: numeric (microseconds) or string (ISO 8601)")
		binary     = fs.String("binary.handling.mode", "bytes", "bytea: bytes, base64, base64-url-safe or hex")
		hstore     = fs.String("hstore.handling.mode", "json", "hstore: json (a string) or map")
		skipped    = fs.String("skipped.operations", "", "operations not written: c, u, d and t, comma-separated, or none (default t)")
		tombstones = fs.Bool("tombstones.on.delete", true, "follow each delete with a tombstone")
		txMeta     = fs.Bool("provide.transaction.metadata", false, "write each transaction's BEGIN and END to <prefix>.transaction, and a transaction block in each event")
		beat       = fs.Duration("heartbeat.interval", 0, "how often to write a heartbeat to __debezium-heartbeat.<prefix> (Debezium's heartbeat.interval.ms; 0: none)")
		beatQuery  = fs.String("heartbeat.action.query", "", "a statement run on the database at each heartbeat")
		signal     = fs.String("signal.data.collection", "", "the signal table, schema.table, for incremental snapshots")
		chunk      = fs.Int("incremental.snapshot.chunk.size", 1024, "rows per chunk of an incremental snapshot")
		unknown    = fs.Bool("include.unknown.datatypes", false, "write columns of types Debezium cannot convert, as their text's bytes")
	)
	security := kafkasec.Flags(fs)
	logFormat := telemetry.LogFormatFlag(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	sec, err := security()
	if err != nil {
		fmt.Fprintln(stderr, "oxbow-pgcdc:", err)
		return 2
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log, err := telemetry.NewLogger(stderr, *logFormat, level)
	if err != nil {
		fmt.Fprintln(stderr, "oxbow-pgcdc:", err)
		return 2
	}
	src, err := postgres.New(postgres.Config{
		DSN: *dsn, PasswordFile: *pgPassword, KafkaSecurity: sec, Tables: split(*tables), Slot: *slot, Publication: *publication, TopicPrefix: *prefix,
		Brokers: split(*brokers), Partitions: int32(*partitions), StatusInterval: *status, Logger: log,
		DecimalHandlingMode: *decimal, TimePrecisionMode: *timePrec, IntervalHandlingMode: *interval,
		BinaryHandlingMode: *binary, HstoreHandlingMode: *hstore, SkippedOperations: *skipped, NoTombstones: !*tombstones,
		ProvideTransactionMetadata: *txMeta, HeartbeatInterval: *beat, HeartbeatActionQuery: *beatQuery,
		SignalDataCollection: *signal, IncrementalSnapshotChunkSize: *chunk, IncludeUnknownDatatypes: *unknown,
	})
	if err != nil {
		fmt.Fprintln(stderr, "oxbow-pgcdc:", err)
		return 2
	}
	defer src.Close()
	if err := src.Run(ctx); err != nil {
		log.Error("oxbow-pgcdc: stopped", "err", err)
		return 1
	}
	st := src.Stats()
	log.Info("oxbow-pgcdc: stopped", "snapshot_rows", st.SnapshotRows, "changes", st.Changes, "acknowledged", st.Acknowledged.String())
	return 0
}

func split(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
