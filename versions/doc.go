// Package versions runs an application's versions side by side and
// switches its readers from one to the next: reprocessing without
// downtime.
//
// When a projection's logic changes, or a bug in it is fixed, its history
// has to be computed again. Version 2 of the application runs as its own
// consumer group (engine.Config.Version: group, internal topics and state
// directory are "<AppID>-<Version>"), reading its inputs from the start,
// beside version 1, which keeps serving. Once version 2 has caught up, it
// is promoted: the control topic — compacted, one partition, "oxbow-control"
// by default — names it the application's active version, and every
// instance's HTTP API (httpapi.Config.Versions, with a Watcher's Active)
// serves its views within moments. Rolling back is promoting version 1
// again; retiring version 1 deletes its group, internal topics and local
// state. Output topics a version writes are the topology's: name them
// after the version where two versions must not write the same topic
// (engine.Config.Version is at hand when the topology is built).
//
// A [Control] does all of it: [Control.RegisterApp] (an instance records
// its version and its topology's source topics, on which its lag is
// measured), [Control.PromoteIfNone] (the first version to run is
// active), [Control.Instances] (a version's running instances and their
// addresses, to which a process that does not run it forwards its reads),
// [Control.Lag], [Control.Promote] (refused with a
// *NotCaughtUpError until the version is at most MaxLag records behind, or
// forced), [Control.Rollback], [Control.Retire] and [Control.Reset] (Kafka
// Streams' reset tool: inputs to the earliest offsets or a time, internal
// topics deleted, local state wiped), with dry runs. The oxbow command
// (cmd/oxbow) is the same for operators, with progress bars and JSON.
//
// A batch job is a version run with engine.Config.Batch: it stops by itself
// once it has processed its inputs up to their ends at its start.
package versions
