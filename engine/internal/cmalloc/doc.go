// Package cmalloc bounds the C allocator's arenas, where pebble keeps its
// block cache and memtables.
//
// Built with cgo, pebble allocates its cache blocks and memtables with C's
// malloc, outside the Go heap. glibc's malloc gives each thread that
// allocates at the same time as another an arena of its own, up to eight
// per CPU, and Go calls C from whichever thread runs the goroutine, so
// blocks are allocated in one arena and freed into another. An arena keeps
// the free space between the blocks it still holds; over an hour of
// steady load the process's resident memory apart from pebble's
// allocations grew by 61 MiB (bench/soak), much of it in 64 MiB arena
// heaps, and by 19 MiB with two arenas (the rest was memtables' pages
// becoming resident as they first filled). Two arenas bound that growth
// at little cost: pebble calls malloc once per
// block read from disk, not once per record. It is the setting Kafka
// Streams' operators give RocksDB (MALLOC_ARENA_MAX=2) for the same
// reason.
//
// Limit sets it once per process, unless MALLOC_ARENA_MAX is in the
// environment (glibc has then read it itself); without cgo or glibc there
// is nothing to bound and it does nothing.
package cmalloc

import (
	"os"
	"sync"
)

// Arenas is the number of arenas Limit allows.
const Arenas = 2

var once struct {
	sync.Once
	applied bool
}

// Limit bounds the C allocator's arenas to Arenas, once per process; it
// reports whether the bound is set by this call or an earlier one (false:
// the environment sets its own, or the allocator has no such setting).
func Limit() bool {
	once.Do(func() {
		if os.Getenv("MALLOC_ARENA_MAX") != "" {
			return
		}
		once.applied = setArenaMax(Arenas)
	})
	return once.applied
}
