// Package engine is Oxbow's stream processor: a typed DSL over streams and
// tables, the topology it records, and [App], which runs a topology on
// Kafka.
//
// # Streams and tables
//
// A [Stream] is a sequence of facts: every record counts. A [Table] is a
// changelog: each record upserts its key and a tombstone (a record without a
// value) deletes it, so only the latest value of a key counts. Summing a
// stream of purchases counts every purchase; summing a table of salaries
// counts each employee's current salary only. Streams become tables by
// aggregation ([GroupedStream.Count], [GroupedStream.Reduce], [Aggregate],
// [Cogroup]) or [Stream.ToTable]; tables become streams with
// [Table.ToStream]. A [GlobalTable] holds a whole topic on every instance.
//
// # Typed DSL
//
// Go methods cannot take type parameters of their own, so an operation is a
// method only when the types of its result are the receiver's, or fixed:
// Filter, Peek, Merge, Split, To, Repartition, ToTable, ToStream,
// GroupByKey, WindowedBy, Reduce, and Count (whose values are int64). An
// operation whose result has a type the caller chooses is a function: [Map],
// [MapValues], [FlatMap], [FlatMapValues], [SelectKey], [GroupBy],
// [GroupTable], [Aggregate], [AggregateTable], [MapTableValues], [Cogroup],
// [Process] and the joins. The windowed aggregations ([WindowedCount],
// [SessionReduce], [CountWindowedAggregate], …) are functions too, even a
// count or a reduce, which chooses no type: their results are keyed by
// [Windowed] or [CountWindowed] of the key type, and a method whose result
// wraps the receiver's type parameter that way makes an instantiation cycle,
// which Go rejects. [SuppressUntilWindowCloses] is a function because it
// applies only to tables with windowed keys. Nobody type-asserts.
//
// Serdes (package serde) are needed only where values touch Kafka or a
// store. Sources name theirs; an operation that produces a new type defaults
// to serde.For of it (strings, bytes, int64 and float64 in Kafka's formats,
// JSON for anything else); [Stream.WithSerdes] and [ValueSerde] choose
// others.
//
// # Topology
//
// A [Builder] records the graph; [Builder.Build] validates it, reporting
// every problem with the name of its node, and returns an immutable
// [Topology]. [Topology.Describe] prints its sub-topologies as Kafka
// Streams does. Names of nodes, stores and internal topics are derived from
// the operation and its parents, so adding unrelated nodes never renames
// anything; [Named] and [Materialized] fix them explicitly, which is what a
// topology that must evolve with its state should do.
//
// An operation that changes the key ([Map], [SelectKey], [FlatMap],
// [GroupBy], [Process]) marks the stream for repartitioning: the next
// stateful step first writes the stream through an internal topic
// partitioned by the new key, which starts a new sub-topology.
// [Stream.Repartition] does it explicitly; [Stream.RepartitionBy] lets a
// function choose each record's partitions, several of them to send a copy
// to each (a truncate that every partition's state must see). A
// repartition topic keeps its records however old their event times (no
// retention by age: reprocessing history through it loses nothing), and
// the application deletes what it has committed every Config.PurgeInterval.
//
// # Time and windows
//
// Every record has an event time: the time Kafka recorded, or what a
// source's [WithTimestamps] function reads from it, or the wall clock
// ([WithWallClockTimestamps]). Stream time is the largest event time a
// task has processed; it survives restarts and moves with the task (in the
// metadata of the committed offsets). A task reading several partitions
// processes their records in event-time order, waiting up to MaxTaskIdle
// for a partition that lags. Windows, stream–stream joins, join grace and
// suppression go by a stream time of their own, as Kafka Streams'
// processors do: the largest timestamp of the records that reached them, so
// a record dropped or filtered out before them moves nothing.
//
// [GroupedStream.WindowedBy] cuts a grouped stream into [TumblingWindows],
// [HoppingWindows] or [SlidingWindows]; [WindowedCount], [WindowedReduce],
// [WindowedAggregate] and [WindowedCogroup] aggregate each window.
// [GroupedStream.SessionWindowedBy] cuts it into [SessionWindows], for
// [SessionCount], [SessionReduce], [SessionAggregate] and [SessionCogroup]:
// a record that bridges sessions merges them, and every session it falls
// into is retracted downstream before the merged one is written. A window
// accepts records until the aggregation's stream time passes its end by the
// grace period (a session: its end plus the gap plus the grace); later ones
// are dropped, counted, and optionally dead-lettered. Results go downstream
// on every update, or once per window after it closes with [EmitFinal]
// (looked for at most once per [EmitInterval] of the wall clock), or
// as each window closes with [SuppressUntilWindowCloses];
// [Table.SuppressUntil] rate-limits any table's updates. [QueryWindowStore]
// and [QuerySessionStore] read the windows of a running instance.
//
// Windows can also be of a number of records rather than of time:
// [GroupedStream.WindowedByCount] cuts each key's records into
// [TumblingCountWindows] or [HoppingCountWindows] for
// [CountWindowedCount], [CountWindowedReduce] and [CountWindowedAggregate]
// (Quix Streams' count windows; Kafka Streams has none). A key's records are
// numbered in its partition's order, and the count is state with a
// changelog, so a restart neither counts a record in two windows nor drops
// one. With [EmitFinal] a window is emitted once, when it is full.
//
// # Joins
//
// [Join] and [LeftJoin] enrich each record of a stream with a table's
// current value for its key; [JoinTables], [LeftJoinTables] and
// [OuterJoinTables] keep a table of two tables' joined rows, recomputed on
// every update of either side and deleted when the join no longer holds.
// Both sides must be co-partitioned; a re-keyed stream is repartitioned
// first, and a table kept in no store is materialized for the join.
// [JoinGlobal] and [LeftJoinGlobal] look a key taken from the stream
// record up in a [GlobalTable], which every instance holds whole.
// [JoinStreams], [LeftJoinStreams] and [OuterJoinStreams] pair records of
// two streams whose times are within [JoinWindows], for as long as each
// side's store keeps them (before+after+grace behind its latest record); a
// record that meets no partner gives its left or outer result once its
// window and grace have passed in the join's stream time (at once if they
// had passed when it arrived), looked for at most once per
// [EmitInterval] of the wall clock.
// [JoinForeignKey] and [LeftJoinForeignKey] join each row of a table with
// the row of another whose key it names, whatever their partitioning.
// A table made [Versioned] keeps its past values for a while, so that a
// stream record joins it as it was at the record's time, and [JoinGrace]
// lets stream records wait for late table updates; [QueryVersionedStore]
// reads a key's value as of any time in the history.
//
// # Low-level processors
//
// [Process] adds a [Processor] for what the DSL cannot say: it forwards to
// all or to named children, reads and writes the stores attached with
// [WithStores], schedules punctuators on stream time or the wall clock, and
// reads the origin of the record being processed.
//
// # Running on Kafka
//
// An [App] is one instance of an application: NewApp(topology, Config),
// then Run. Instances with the same AppID form a consumer group and share
// the topology's tasks (one per input partition and sub-topology); each
// task's state lives in the instance's local pebble database and in a
// compacted changelog topic, so it moves with the task and survives a lost
// disk. Commits are at least once by default: input offsets are committed
// only after every output and changelog record they caused was
// acknowledged, and local state is applied only after that. With
// Guarantee ExactlyOnce, outputs, changelogs and input offsets commit in
// one Kafka transaction, so that after a crash or a rebalance every input
// has counted exactly once. StandbyReplicas keeps warm copies of each
// task's state on other instances for a fast failover. Records that fail to decode, process or
// be produced follow a [ErrorPolicy]: fail, skip, or dead-letter.
// [QueryTable] reads the store of a table while the instance runs, with
// the serdes it was written with ([QueryWindowedTable],
// [QuerySessionTable], [QueryCountWindowedTable] and [QueryVersionedTable]
// the others: a table knows its store's name, serdes and windows);
// [QueryKeyValueStore] and its kin read a store by name, and refuse one
// that holds something else ([ErrStoreKind]). [KeyOwner] says which
// instance owns a key. Metrics and traces go to the
// OpenTelemetry providers in the Config.
//
// # Testing
//
// Package enginetest runs a topology in memory, deterministically: pipe
// records with timestamps, read output topics and stores, advance the wall
// clock. Package kafkaenv gives tests, benchmarks and examples a broker: a
// real one from KAFKA_BROKERS, or an embedded one.
//
// # Differences from Kafka Streams
//
// The DSL gives the records Kafka Streams 4.4 gives: the same keys and
// values, the same timestamps, at the same moments and in the same order,
// tables forwarding the same deletes (a delete of a key that was not there
// included: see [OmitAbsentDeletes]). Package engine/difftest checks it
// against Kafka Streams itself, every operation on generated inputs; the
// driver of package enginetest behaves as Kafka Streams' TopologyTestDriver
// (which looks for closed windows and non-joined results at every record,
// where a running application looks once a second). These are the
// differences, all on purpose:
//
//   - Typed functions see no nulls. A record without a key reaches a user
//     function with the zero key (the record keeps its null key where the
//     key is kept). A stream record without a value (a tombstone) passes
//     the operations that keep the key (Filter, MapValues, FlatMapValues,
//     ...) unchanged and is dropped and counted by those that need the
//     value (Map, SelectKey, FlatMap, Split, GroupBy, the reductions and
//     aggregations); Kafka Streams hands both to the function as null. Its
//     windowed and session aggregations give records without a value to
//     reduce and aggregate functions (against their own javadoc); Oxbow's
//     drop them, and [WindowedCount] and [SessionCount] count them as Kafka
//     Streams does.
//   - Stream time survives a restart. A task resumes the stream time it
//     committed, and the stream times of its windows, joins, join buffers
//     and suppressions start there (a processor's own time is never ahead
//     of its task's); Kafka Streams' processors start theirs afresh after a
//     restart, and may then accept a record for a window that had closed,
//     or hold back one they would have let go. Likewise the numbers that
//     keep a stream–stream join's records of one key and time apart. A
//     window store's own time (its latest window's, which decides what
//     Kafka Streams' store would hide and when windows expire) does start
//     afresh after a restart, where Kafka Streams rebuilds it as it
//     restores the store: until a window is written, none is hidden.
//   - Windows stay in their store for a day by default ([Retention]);
//     Kafka Streams keeps them only as long as the windows need. What an
//     aggregation sees and emits still follows Kafka Streams' retention: a
//     window more than it behind the latest one is not found (a late record
//     starts it afresh, emit-final skips it), unless the record cache holds
//     it. With the cache on, Oxbow takes every window to be in the cache;
//     Kafka Streams' (10 MiB, least recently used) may have evicted some.
//   - [SuppressUntilWindowCloses] has no buffer bound.
//   - A left stream–table join with [JoinGrace] joins a record without a
//     key at once; Kafka Streams 4.4 throws on it.
//   - A table–table join, a foreign-key join's answer to a subscription
//     included, reads the other table as that table last sent it
//     downstream, not with the updates still waiting in the record cache;
//     Kafka Streams reads through the cache. A change the cache holds
//     reaches the join when it is flushed anyway, so the join reading it
//     early only gave a result sooner, and a wrong one when the cache's
//     updates of the key cancelled out (an insert and a delete between
//     two commits, which the cache does not forward): the result stayed
//     for a row that was gone (a join of a row with a right row that
//     never was, or an inner join's result kept after both sides were
//     deleted). Without a cache the two read the same.
//   - Oxbow's tables carry every change's old value downstream, also where
//     Kafka Streams sends none because nothing downstream asked for it;
//     only which changes go downstream follows Kafka Streams.
//   - Oxbow has what Kafka Streams has not: count windows, emit-final for
//     cogroups, [OmitAbsentDeletes] (no table forwards a delete of a key it
//     did not have: Oxbow's former rule).
//   - Repartition topics carry, besides the data, a position marker per
//     partition at each commit that moved the writer's positions (no key,
//     no value, header [PositionHeader]): it makes [App.StorePosition]
//     follow the data through them (Kafka Streams' IQv2 positions stop at
//     a store's own input topics). Another reader of these internal topics
//     sees the markers, and skips them by the header.
//   - An instance with a stable [Config.InstanceID] (given, or kept in its
//     state directory) is a static member of its group without being told
//     (Kafka Streams needs group.instance.id set), and keeps its tasks
//     after a clean Close until [Config.SessionTimeout] unless
//     [Config.LeaveGroupOnClose]. The group protocol is cooperative
//     (revoking only the tasks that move) where Kafka Streams' classic one
//     is eager. A task waits for a warm-up of its state on its new owner as
//     with Kafka Streams' max.warmup.replicas ([Config.MaxWarmupReplicas]),
//     but the probing rebalance that moves it comes when the warm-up has
//     caught up, asked for by the instance that holds it, rather than every
//     probing.rebalance.interval.ms (10 minutes) from the group's leader.
package engine
