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
// Still to come (the CDC issue): truncates applied to every partition, and
// cdc/postgres, a logical-replication source.
package cdc
