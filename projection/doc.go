// Package projection names the views an application serves: a store of a
// running topology (a table, an aggregation) with the serdes of its keys
// and values and how a key is written in a URL, so that package httpapi
// serves it with no code of its own.
//
//	stock, err := projection.NewKeyValue("stock", "stock-store", serde.String, serde.Int64)
//	views, err := projection.NewRegistry(stock)
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
// [NewWindowed] declares a view of a windowed aggregation, which answers a
// key's windows over a time range ([View.Fetch]); [NewCountWindowed] one of
// a count-windowed aggregation (engine.CountWindows), which answers the
// windows of a key the aggregation keeps ([View.FetchCount]). A windowed
// view's scans and changes give each key as a [WindowKey]: the record key
// and its window.
package projection
