// Package cdc will turn Debezium-format change streams into engine tables,
// and its sub-package postgres will capture PostgreSQL tables by logical
// replication into Kafka in the same format.
//
// Nothing is here yet: it needs the engine's runtime and joins (see the
// repository's DESIGN.md).
package cdc
