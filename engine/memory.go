package engine

import (
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"sync"
)

// The memory budget (Config.MemoryBudget) divides itself between what
// holds an instance's memory, in fixed shares:
//
//	pebble's block cache        1/4
//	pebble's memtables          1/8  (two of 1/16: one written, one flushing)
//	the record cache            1/16 (unless Config.CacheBytes is set)
//	each Kafka fetch's bytes    1/16 (kgo.FetchMaxBytes; KafkaOptions may set it)
//	the Go heap's soft limit    5/8  (GOMEMLIMIT: all but the cache and memtables,
//	                                  which pebble allocates outside the Go heap)
//
// A restore batches the changelog's records in the Go heap, four
// memtables' worth (1/4) shared by the store partitions restoring, and up to
// as much again while the previous batches are written as tables: half the
// budget, borrowed from the heap's share while the tasks restore and
// process nothing (a restore of 1 GB on one CPU peaked at 215 MiB of 256).
//
// The record cache, the fetched records, the tasks' queues, the
// goroutines' stacks and the HTTP layer live in the Go heap, whose soft
// limit makes the collector work harder as the heap nears it rather than
// let the process grow. The limit is process-wide: each App that runs adds
// its share and removes it when Run returns, and none is set if the
// process has a limit already (GOMEMLIMIT in its environment or one set
// with debug.SetMemoryLimit), which is then the user's to size.
const minMemoryBudget = 64 << 20

// memoryShares is what a budget gives each holder, in bytes.
type memoryShares struct {
	blockCache, memTable, recordCache, fetch, heap int64
}

func splitBudget(b int64) memoryShares {
	return memoryShares{blockCache: b / 4, memTable: b / 16, recordCache: b / 16, fetch: min(b/16, math.MaxInt32), heap: b - b/4 - 2*(b/16)}
}

// heapLimits sums the heap shares of the Apps running in the process and
// sets the Go runtime's soft memory limit to it.
var heapLimits struct {
	mu     sync.Mutex
	shares map[*App]int64
	// user: the process had a limit of its own when the first App came;
	// then none is set.
	user, checked bool
}

// addHeapShare adds a's share of the heap limit; the returned func removes
// it (the last App's removal lifts the limit).
func addHeapShare(a *App, share int64) (remove func()) {
	if share <= 0 {
		return func() {}
	}
	h := &heapLimits
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.checked {
		h.checked = true
		h.user = os.Getenv("GOMEMLIMIT") != "" || debug.SetMemoryLimit(-1) != math.MaxInt64
	}
	if h.user {
		return func() {}
	}
	if h.shares == nil {
		h.shares = map[*App]int64{}
	}
	h.shares[a] = share
	setHeapLimit()
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(h.shares, a)
		setHeapLimit()
	}
}

// setHeapLimit sets the sum of the shares (none: no limit). h.mu held.
func setHeapLimit() {
	var sum int64
	for _, s := range heapLimits.shares {
		sum += s
	}
	if sum == 0 {
		sum = math.MaxInt64
		heapLimits.checked = false // the next App looks at the process afresh
	}
	debug.SetMemoryLimit(sum)
}

func checkBudget(b int64) error {
	if b != 0 && b < minMemoryBudget {
		return fmt.Errorf("engine: MemoryBudget %d is under the least budget, %d bytes (64 MiB); 0 sets none", b, minMemoryBudget)
	}
	return nil
}
