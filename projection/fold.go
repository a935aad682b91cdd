package projection

import (
	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// Fold defines a view in one call: the events of a topic (an aggregate's
// event topic, say), keyed as they are, folded per key into a value, kept
// in a store named after the view and served as a key-value view. apply
// gets the key, an event and the value so far (init's, for a new key).
// For more — windows, joins, re-keying — build the table with the engine's
// DSL and declare the view with Of or OfWindowed.
func Fold[K, E, V any](b *engine.Builder, name, topic string, keys serde.Serde[K], events serde.Serde[E], values serde.Serde[V],
	init func() V, apply func(key K, event E, value V) V, opts ...Option) (*View, error) {
	t := engine.Aggregate(engine.NewStream(b, topic, keys, events, engine.Named(name+"-events")).GroupByKey(), init, apply,
		engine.Named(name), engine.Materialized(name), engine.ValueSerde(values))
	return Of(t, opts...)
}
