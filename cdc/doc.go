// Package cdc turns database change streams into tables: it reads
// Debezium-format change events (JSON with or without the embedded schema,
// the full envelope or ExtractNewRecordState's unwrapped rows) into
// [Event]s — create, update, delete, snapshot read, truncate, and the
// tombstone after a delete — with the primary key's columns, the before and
// after images and where in the database's log the change happened
// ([Decode]); [Merge] keeps the previous value of an unchanged TOASTed
// column the connector did not send.
//
// Still to come (the CDC issue): a CDC-fed table in one line (key
// normalization, repartitioning, duplicates after a connector restart,
// truncates), and cdc/postgres, a logical-replication source.
package cdc
