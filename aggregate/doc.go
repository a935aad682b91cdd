// Package aggregate is Oxbow's event sourcing: commands that emit events,
// decided by the engine as the single writer of each aggregate, exactly
// once.
//
// An aggregate is a decider: an initial state, Decide(state, command) →
// events or a domain error, and Evolve(state, event) → state ([Config]).
// Commands and events are Go types registered by name ([Types],
// [Register]); they travel as self-describing JSON envelopes with their
// type in a header, and events of older schema versions are upcast when
// read ([Types.Upcast]). Or they travel with schemas kept in a schema
// registry, in Confluent's wire format ([Types.Use] with a serde of
// package engine/serde/registry), and evolve under the registry's
// compatibility rule.
//
// # How a command runs
//
// A command is a record of the command topic keyed by aggregate id, so one
// task — one instance at a time — decides every command of an aggregate.
// [Aggregate.AddTo] adds that command processor to a topology. For each
// command it:
//
//   - returns the recorded outcome if the command's id was seen before
//     (within OutcomeRetention), and does nothing else;
//   - loads the aggregate's state and version from its own store (never by
//     reading its event topic back, which would race with what it has not
//     yet written);
//   - answers Conflict if the command expected another version;
//   - runs Decide, and Evolve over the events: an error, or a panic, makes
//     the command Rejected, with the error as data ([Rejection]);
//   - writes the events to the event topic with headers (type, aggregate id
//     and version, command id, correlation and causation ids; the engine
//     adds the trace context), and the new state and version to the store;
//   - once Kafka has acknowledged the events (the engine's BeforeCommit
//     hook), records the outcome, with the events' positions, under the
//     command's id and writes it to the reply topic.
//
// With engine.ExactlyOnce (the default for a topology that decides) all of
// that commits in one transaction with the command's offset: after a crash anywhere, the command is decided again
// from the state before it, and nothing it wrote is visible twice. The
// processor asks for a commit as soon as it has decided what was polled
// (engine's RequestCommit), so a command's round trip is one commit, not a
// commit interval (on one Kafka broker, at 200 commands/s: p50 13–38ms).
//
// # Submitting
//
// A [Client] writes commands and waits for their outcomes from any process:
// Accepted with the new version and the events' positions (with which a
// reader can wait until a view reflects them), Rejected with the domain
// error, or Conflict. A command id makes a retry safe: a command submitted
// again with its id returns its first outcome. Without an outcome before
// the deadline, Submit returns [ErrNoOutcome]: the aggregate's owner may be
// down; submit again with the same id.
//
// Another service needs only the aggregate's [Contract] — its topics and
// registered types, published in a package of types — to submit commands
// ([Contract.NewClient]), to send them from a process manager (package
// saga) or to read the events. The contract evolves by schema versions and
// upcasters, for commands as for events.
//
// # State and its loading
//
// The state store ("<name>-state") holds each aggregate's latest state and
// version, with a compacted changelog: an instance that lost its disk
// restores one snapshot per aggregate rather than replaying every event,
// and one that kept it replays only the changelog's tail. [Aggregate.Fold]
// rebuilds a state from events.
//
// # Testing
//
// Package aggregatetest runs an aggregate's real command processor in the
// engine's in-memory driver, given events, when a command, then events, a
// rejection or a conflict.
package aggregate
