// Package projection names the views an application serves: a store of a
// running topology (a table, an aggregation) with the serdes of its keys
// and values and how a key is written in a URL, so that package httpapi
// serves it with no code of its own.
//
//	stock := engine.NewTable(b, "stock", serde.String, serde.Int64, engine.Materialized("stock"))
//	view, err := projection.Of(stock) // the store's name, serdes and kind from the table
//	views, err := projection.NewRegistry(view)
//
// [NewKeyValue] and its kin declare a view by a store's name and serdes
// instead; httpapi.New checks them against the topology
// ([Registry.Check]).
//
// [Fold] defines a view from an event topic in one call: the events folded
// per key into a value.
//
// A view reads the instance's committed state through engine.Queryable:
// point reads ([View.Get]: a key of another instance is an
// *engine.NotLocalError naming it, for the HTTP layer to forward), and
// ranges and prefix scans of the partitions the instance holds
// ([View.Range]), in the order of the stored key bytes, resumable after a
// key (a cursor).
//
// The input positions a view reflects are the instance's
// (engine.App.Positions), which httpapi waits on for read-your-writes.
//
// [OfWindowed] declares a view of a windowed aggregation, which answers a
// key's windows over a time range ([View.Fetch]); [OfCountWindowed] one of
// a count-windowed aggregation (engine.CountWindows), which answers the
// windows of a key the aggregation keeps ([View.FetchCount]). A windowed
// view's scans and changes give each key as a [WindowKey]: the record key
// and its window.
package projection
