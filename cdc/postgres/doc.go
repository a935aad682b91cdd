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
// tombstone) and truncates are written in commit order, keyed by the
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
// needs a new slot. Tables added to Config.Tables later are an error too:
// their rows were never snapshotted.
//
// Values are converted from PostgreSQL's text form to JSON the way
// Debezium's connector does by default: booleans and integer and
// floating-point types as JSON values, date as days since the epoch, time
// and timestamp as milliseconds for a precision of 0 to 3 and as
// microseconds above (Debezium's adaptive time.precision.mode), timestamptz
// as an ISO-8601 string in UTC,
// bytea as base64, everything else (text, uuid, json, jsonb, enums, arrays)
// as a string of its text form — except numeric, which is a JSON number
// with its exact digits rather than Debezium's unscaled bytes. Events are
// written without an embedded schema (the JSON converter's
// schemas.enable=false).
//
// The source runs inside a service (New, then Run in a goroutine the
// service owns) or as a command, cmd/oxbow-pgcdc.
package postgres
