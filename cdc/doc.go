// Package cdc turns database change streams into tables: it reads
// Debezium-format change events (JSON with or without the embedded schema,
// the full envelope or ExtractNewRecordState's unwrapped rows) into
// [Event]s — create, update, delete, snapshot read, truncate, and the
// tombstone after a delete — with the primary key's columns, the before and
// after images and where in the database's log the change happened
// ([Decode]); [Merge] keeps the previous value of an unchanged TOASTed
// column the connector did not send.
//
// [NewTable] declares a CDC-fed table in one line, keyed by the user's key
// type (normalized from the primary key's columns, [Column]) and
// repartitioned by it, so that a stream joins it:
//
//	customers := cdc.NewTable(b, "customers", "pg.public.customers", cdc.Column[int64]("id"), serde.Int64, serde.JSON[Customer]())
//	engine.Join(orders, customers, enrich).To("enriched-orders")
//
// Changes are ordered by their place in the database's log
// ([Source.Position]: the transaction's commit, then the change's own
// LSN), which makes the table idempotent: a connector that restarts and
// writes changes again changes nothing twice, and a truncate, sent to every
// partition, deletes exactly the rows changed before it, wherever they
// came from.
//
// Package cdc/postgres is a source that writes these events from
// PostgreSQL itself, by logical replication; cmd/oxbow-pgcdc runs it as a
// command.
package cdc
