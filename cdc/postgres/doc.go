// Package postgres is a change-data-capture source for PostgreSQL: it
// captures a set of tables by logical replication (the pgoutput plugin, via
// jackc/pglogrepl and pgx) and writes their changes to Kafka as Debezium
// change events, which cdc.NewTable turns back into tables.
//
// A [Source] makes what it needs when missing: the tables' topics
// ("<prefix>.<schema>.<table>", Debezium's naming), the publication and the
// replication slot. A new slot comes with a snapshot exported at its
// consistent point: every row of the tables is written as a read event
// ("op":"r") as of that point, and streaming goes on from it, so that the
// snapshot and the stream neither overlap nor leave a gap. Then each
// committed transaction's inserts, updates, deletes (each followed by its
// tombstone) and, if asked for, truncates are written in commit order, keyed by the
// primary key's columns, partitioned by the key's bytes; a primary-key
// change is the delete of the old key and the create of the new one, as
// Debezium writes it. Relation messages (schema changes) are followed. With
// REPLICA IDENTITY FULL, updates and deletes carry the whole row before;
// otherwise deletes carry the key, and an unchanged TOASTed column is
// Debezium's placeholder, which cdc.NewTable resolves to the previous value.
//
// Delivery is at least once, with the duplicates bounded and harmless. The
// position acknowledged to the server — from which the slot resumes, and up
// to which it lets the server recycle WAL — is the end of the last
// transaction that Kafka has acknowledged every change of, and of every
// transaction before it. After a crash of the source, the server replays
// from there: at most a status interval's worth of changes again. After a
// crash or restart of the database, the slot may resume from an older
// position, the last one the server wrote to disk; the source also records
// its acknowledged position in its state topic and passes over the
// transactions before it. Every event carries its position (the source's
// "lsn", "commit_lsn" and Debezium's "sequence"), by which cdc.NewTable
// recognizes one it has applied.
//
// If the source stops during the initial snapshot, it takes it again when
// it restarts, at the slot's position, and replays the changes since over
// it. A slot that disappears after its snapshot (dropped by hand, or lost
// with the server) is an error: changes may be lost, and capturing again
// needs a new slot.
//
// With a signal table (Config.SignalDataCollection), tables are also
// snapshotted incrementally, as Debezium's incremental snapshots do: a
// table added to Config.Tables after the initial snapshot, or named by an
// execute-snapshot signal row, is read in chunks of its primary key's
// order while streaming goes on, each chunk between two rows the source
// writes into the signal table (a window); a streamed change in the window
// of a key the chunk has wins over the chunk's row. The chunks' rows are
// read events with "snapshot":"incremental". Progress is kept in the state
// topic once Kafka has each chunk, so that a restarted source goes on from
// the last chunk it has. Without a signal table, tables added later are an
// error: their rows were never snapshotted.
//
// The events are Debezium's PostgreSQL connector's (3.x, pgoutput, Kafka
// Connect's JSON converter without schemas), byte for byte where they can
// be: the key's bytes (and so the partition and the compaction identity),
// the envelope (before, after, source, transaction, op, ts_ms, ts_us,
// ts_ns), the source block (snapshot markers first, first_in_data_collection,
// true, last_in_data_collection and last; sequence, txId, lsn, ts_us, ts_ns,
// xmin), the delete's tombstone, a primary-key change as a delete (with a
// __debezium.newkey header), its tombstone and a create (with
// __debezium.oldkey), and the __debezium.context.* headers. Values are
// converted type by type as Debezium's connector converts them: see
// Config for the options that change them (decimal.handling.mode,
// time.precision.mode, interval.handling.mode, binary.handling.mode,
// hstore.handling.mode, skipped.operations, tombstones.on.delete,
// provide.transaction.metadata, heartbeat.interval.ms,
// heartbeat.action.query, signal.data.collection,
// incremental.snapshot.chunk.size, include.unknown.datatypes) and their
// defaults, which are Debezium's. With those defaults, numeric and
// money are the unscaled value's bytes in base64 (and a numeric without a
// scale an object of scale and value): a service that wants JSON numbers
// sets DecimalHandlingMode "double" or "string", as a Debezium user does.
// Truncates are not written unless SkippedOperations says so.
//
// The differential test (debezium_test.go) runs Debezium's connector
// (embedded, the Java program in ./debezium) beside a Source on the same
// database and compares every event. What differs, on purpose:
//
//   - source.version is "oxbow", and source has one more field,
//     "commit_lsn", the LSN of the change's transaction's commit, by which
//     cdc.NewTable orders changes (cdc.Source.Position).
//   - A truncate written to a compacted topic has the key {} (no row's),
//     since the broker refuses a record without a key there; Debezium's
//     write would fail.
//   - The first element of sequence, the end of the transaction before,
//     is null for the first transaction after the initial snapshot, as with
//     Debezium; after a restart it is the position the stream resumed from.
//
// Columns of the types Debezium's connector has no conversion for (the
// geometric types but point, tsquery, pg_lsn, txid_snapshot, composites,
// arrays of money, interval, xml, name, point and varbit, other
// extensions' types) are left out of the events, as Debezium leaves them
// (Config.IncludeUnknownDatatypes: as their text's bytes, as its
// include.unknown.datatypes=true writes them).
//
// And what is not yet as Debezium writes it: pgvector's vectors are
// written as strings of their text (the differential test has no pgvector
// to check them on);
// Debezium's options other than those of Config (column filters and masks,
// message.key.columns, snapshot modes other than initial, signals other
// than execute-snapshot) do not exist here, nor does its topic of logical
// decoding messages.
//
// The source runs inside a service (New, then Run in a goroutine the
// service owns) or as a command, cmd/oxbow-pgcdc.
package postgres
