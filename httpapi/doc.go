// Package httpapi will be Oxbow's HTTP layer, a plain http.Handler on chi:
// views by key, range and window, change feeds, commands, health, status,
// metrics and the topology, with requests for keys owned by another
// instance forwarded to it.
//
// Nothing is here yet: it needs the engine's runtime and package projection
// (see the repository's DESIGN.md).
package httpapi
