package cmalloc_test

import (
	"fmt"

	"github.com/oxbow-dev/oxbow/engine/internal/cmalloc"
)

// Limit is called before the first pebble database opens; what it reports
// depends on the platform (true on Linux with glibc and cgo, unless
// MALLOC_ARENA_MAX is set).
func ExampleLimit() {
	_ = cmalloc.Limit()
	fmt.Println("arenas at most", cmalloc.Arenas)
	// Output: arenas at most 2
}
