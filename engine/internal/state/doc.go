// Package state is the local state of one application instance: one pebble
// database shared by every task and store on it (one block cache, one
// memtable budget), each store partition under its own key prefix.
//
//	db, _ := state.Open(dir, state.Options{})
//	task := db.Task()                      // one per running task
//	counts := task.Store("counts", 3)      // a topo.KVStore
//	counts.Put(key, value, ts)             // pending: visible to the task's reads
//	task.SetCheckpoint("app-counts-changelog", 3, 42)
//	task.Commit()                          // writes and checkpoint, atomically
//
// # Pending state and checkpoints
//
// A [Task] holds the writes of a task between commits in a pebble indexed
// batch; the task's Get and Range merge the batch with the committed state.
// The runtime commits the Kafka side first (producer flush or transaction,
// including the changelog records of those writes), then calls
// [Task.SetCheckpoint] for each changelog partition with the offset after
// its last record and [Task.Commit], which applies writes and checkpoints in
// one pebble batch. If the Kafka side fails or aborts, [Task.Discard] drops
// the writes. So the local state of a store partition always equals its
// changelog up to its checkpoint: after a crash the runtime restores only
// the tail, with a [Restorer], from [DB.Checkpoint]; it [DB.Wipe]s a
// partition only when the checkpoint is older than the changelog's log
// start (or missing while the changelog has been compacted).
//
// Commits are not synced one by one: [DB.Sync] syncs what came before it
// (see [Task.Commit]); a Restorer syncs each Flush.
//
// # Key layout
//
// Every pebble key starts with a tag byte:
//
//	0x00                                   layout version (1 byte value)
//	0x01 uvarint(len) store  be32(part) k  -> be64(timestamp ms) value
//	0x02 uvarint(len) topic  be32(part)    -> be64(next offset)
//	0x03 uvarint(len) store  be32(part)    -> changelog topic
//
// The length prefix keeps one store partition's keys from sharing a prefix
// with any other's, so a range bounded by the prefix never leaks into the
// next partition or into a store whose name extends this one's. Tag 0x03
// lists the store partitions held locally ([DB.Stores]); it is written with
// a task's first commit and with every restore batch, and deleted by Wipe.
//
// # Concurrency
//
// A DB is safe for concurrent use. A Task, the store views it returns, and a
// Restorer are each used by one goroutine at a time (a task is processed by
// one goroutine at a time), but different Tasks and Restorers run
// concurrently. Two Tasks, or a Task and a Restorer, must not write the same
// store partition: ownership of a partition moves between them only after
// the previous owner committed or discarded and closed. DB.Close waits for
// operations and Range loops in progress; operations after it return
// [ErrClosed] (wrapped with [topo.ErrStoreClosed] by store views). A Range
// loop body may write to the store and may Commit or Discard its task: the
// loop goes on over the snapshot it started with.
package state
