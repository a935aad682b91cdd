package runtime

import (
	"sync"
	"time"
)

// No silent wait.
//
// Every call of the loop that waits on Kafka says so at WARN once it has
// waited waitBound (5s), naming what it waits for, and at INFO how long it took
// when it ends: the producer id (InitProducerID, which also fences a
// previous incarnation), the acknowledgement of the records produced,
// the commit or abort of a transaction (the group coordinator's
// TxnOffsetCommit, the transaction coordinator's EndTxn), the offsets'
// commit at least once, and a restoring task's wait for its changelogs to
// settle. Each is bounded too (endTimeout, flushTimeout, initTimeout,
// TaskTimeout), and Degraded follows when the bound passes; the WARN is
// for the time before. What waits without a call of its own (a
// read-committed fetch held at a last stable offset, a group's offsets
// kept unstable, a restore that moves nothing) the stall watcher sees
// (stall.go). TestWaitsAreWatched lists the calls and checks that each
// one's function starts a wait.

// waitBound is how long a wait on Kafka lasts before it is said at WARN:
// far above what any of them takes when the brokers answer (milliseconds),
// below every bound that ends them (flushStall, 10s, the shortest).
const waitBound = 5 * time.Second

// waiting starts a wait on Kafka for what; done ends it. A wait that ends
// before its WARN is said is not said at all.
func (r *Runtime) waiting(what string) (done func()) {
	start := time.Now()
	var (
		mu          sync.Mutex
		ended, told bool
	)
	tm := time.AfterFunc(waitBound, func() {
		mu.Lock()
		defer mu.Unlock()
		if ended {
			return
		}
		told = true
		r.log.Warn("waiting on Kafka", "for", what, "waited", waitBound)
	})
	return func() {
		tm.Stop()
		mu.Lock()
		defer mu.Unlock()
		ended = true
		if told {
			r.log.Info("done waiting on Kafka", "for", what, "took", time.Since(start).Round(time.Millisecond))
		}
	}
}
