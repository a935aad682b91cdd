// Package aggregate will hold Oxbow's event-sourced aggregates: a decider
// (Decide(state, command) -> events | error, Evolve(state, event) -> state)
// run by the engine as the single writer of each aggregate id, with
// versions, idempotent command ids and outcomes returned to the caller.
//
// Nothing is here yet: it is built on the engine's runtime and exactly-once
// processing, which come first (see the repository's DESIGN.md).
package aggregate
