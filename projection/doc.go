// Package projection will hold named, queryable views: event streams folded
// into tables with the engine (optionally windowed or joined with CDC-fed
// tables), registered with their serdes and query capabilities so that
// package httpapi serves them without custom code.
//
// Nothing is here yet: it is built on the engine's runtime, windows and
// joins (see the repository's DESIGN.md).
package projection
