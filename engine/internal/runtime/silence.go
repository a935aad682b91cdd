package runtime

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Kafka out of reach.
//
// A network that loses this instance's packets to the brokers (a cut, a
// one-way loss, a firewall) fails nothing at first: franz-go keeps its
// connections and resends, fetches return nothing, and an instance with
// nothing to commit never fails a round (trouble.go) or stalls a flush.
// It would answer reads from stale state and stay ready. But a member of
// a group always has requests out — fetches, which Kafka answers within
// their max wait (5s), and heartbeats (every 3s at most) — so an instance
// that Kafka answers has an answer every few seconds. answers notes when
// the group client last had one, and since when its requests have waited
// without one; past silentBound the instance is out of reach, which
// Stalled reports (readiness fails, commands answer 503 at once) and the
// watcher logs, until an answer comes.

// silentBound is how long the group client's requests may wait with no
// answer from any broker before the instance counts as out of Kafka's
// reach: twice the longest a healthy fetch waits.
const silentBound = 10 * time.Second

// answers is the group client's hook that notes Kafka's answers.
type answers struct {
	asked atomic.Int64 // unix nanos: the first request written since the last answer (0: none)
	last  atomic.Int64 // unix nanos: the last answer
}

// Requests that wait on other members by design, answered only when the
// group's rebalance completes.
const (
	keyJoinGroup = 11
	keySyncGroup = 14
)

// OnBrokerWrite implements kgo.HookBrokerWrite.
func (a *answers) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err != nil || key == keyJoinGroup || key == keySyncGroup {
		return
	}
	a.asked.CompareAndSwap(0, time.Now().UnixNano())
}

// OnBrokerE2E implements kgo.HookBrokerE2E.
func (a *answers) OnBrokerE2E(_ kgo.BrokerMetadata, _ int16, e kgo.BrokerE2E) {
	if e.WriteErr != nil || e.ReadErr != nil {
		return
	}
	a.last.Store(time.Now().UnixNano())
	a.asked.Store(0)
}

// silence is how long the requests have waited with no answer (zero if
// none waits).
func (a *answers) silence(now time.Time) time.Duration {
	if t := a.asked.Load(); t != 0 {
		return now.Sub(time.Unix(0, t))
	}
	return 0
}

// unreachable says so when no broker has answered the group client for
// silentBound while its requests waited; nil otherwise, and nil while the
// instance is Degraded (its Trouble says what Kafka did) or stops.
func (r *Runtime) unreachable(now time.Time) error {
	if r.State() == Degraded {
		return nil
	}
	return r.silent(now)
}

// silent is unreachable whatever the state, but a stopping one's.
func (r *Runtime) silent(now time.Time) error {
	switch r.State() {
	case Stopping, Stopped, Failed:
		return nil
	}
	d := r.answers.silence(now)
	if d < silentBound {
		return nil
	}
	last := "never"
	if t := r.answers.last.Load(); t != 0 {
		last = now.Sub(time.Unix(0, t)).Round(time.Second).String() + " ago"
	}
	return fmt.Errorf("no broker of %v has answered this instance for %v (last answer: %s): Kafka is out of its reach (the network?); it keeps trying",
		r.cfg.Brokers, d.Round(time.Second), last)
}

// tellUnreachable logs when the instance goes out of Kafka's reach and
// when it is back; the watcher calls it every tick.
func (w *stallWatch) tellUnreachable(now time.Time) {
	err := w.r.silent(now)
	switch {
	case err != nil && w.outOfReach.IsZero():
		w.outOfReach = now
		w.r.log.Warn("Kafka does not answer this instance", "err", err)
	case err == nil && !w.outOfReach.IsZero():
		w.r.log.Info("Kafka answers this instance again", "after", now.Sub(w.outOfReach).Round(time.Second))
		w.r.kafkaBack.Store(now.UnixNano())
		w.outOfReach = time.Time{}
	}
}
