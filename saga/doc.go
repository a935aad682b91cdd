// Package saga gives Oxbow its process managers: reactions from events to
// commands, run by the engine, exactly once.
//
// An aggregate (package aggregate) turns a command into events; a
// projection turns events into views. A process manager — a saga, in
// Axon's words; a policy — turns events into commands: an order placed in
// one service reserves stock in another, a shoe that falls below its
// threshold orders a shipment, a failed payment cancels the order. It has
// instances, each with its own state, keyed by a correlation id (the
// order's, the shoe's), and is defined like a decider:
//
//	React(state, event) → (state, actions)
//
// where the actions are commands to aggregates ([Target.Send]), timeouts
// ([SetTimeout], [CancelTimeout]) and [End].
//
// # What it reacts to
//
// Its Sources are other aggregates' events ([On], from their
// aggregate.Contract: topics and types, no shared code or process); a
// correlate function names the instance each event concerns. The
// [Outcome] of every command an instance sent comes back to it — accepted,
// rejected or conflicting — so a rejection can be compensated. A timeout
// that comes due comes back as a [Timeout], on the wall clock or on stream
// time (Config.TimeoutClock).
//
// # How it runs
//
// [Manager.AddTo] adds it to a topology: its sources' events and its
// targets' outcomes are keyed by instance and written through a
// repartition topic, so that one task decides each instance; that task
// keeps the instances in a store ("<name>-state", with a changelog) and
// their timeouts in another ("<name>-timeouts"), and writes the commands
// to the targets' command topics. With engine.ExactlyOnce (its default)
// the commands, the new state and the input's offset commit in one
// transaction: after a crash each input has caused its commands once.
// Commands carry ids made from the process manager's name, the
// instance, its run and a count ("restock/blue/1338e4dd/3"), the same each
// time the same input is reacted to from the same state; their
// correlation id is the instance's (its first event's), their causation
// id the input's place in Kafka.
//
// # Testing
//
// Package sagatest runs a process manager's real processor in the engine's
// in-memory driver: given events, when an event, an outcome or the passing
// of time, then these commands.
package saga
