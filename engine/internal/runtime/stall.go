package runtime

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine/hanging"
)

// No silent stall.
//
// An instance can stop making progress with nothing failing: a
// transaction Kafka left open on a partition it reads (package hanging
// says how that happens) holds its read-committed fetch of that partition
// at the last stable offset, its restore waiting for the changelog to
// settle, or its group's offset fetch, which franz-go retries on
// UNSTABLE_OFFSET_COMMIT without end. The other partitions may go on
// meanwhile. A watcher beside the loop notices: when an input partition
// of an active task has had no record polled for stallLook while records
// wait on it (past its last stable offset, or, unread, while its group's
// offsets are unstable; see behind), or a task restores and nothing has
// been restored for as long. Under
// exactly-once it then looks for transactions left open on the partitions
// of the instance's inputs and internal topics and on its group's
// partition of __consumer_offsets. What it finds it repairs with the
// marker the coordinator decided (Config.RepairHanging), or reports: an
// ERROR naming the partition, producer, epoch, first offset, age,
// coordinator state and remedy, again at a back-off; the gauge
// oxbow.kafka.hanging_transactions; Stalled, which readiness answers. It
// never touches a transaction its coordinator still has in progress.
// Where it finds none, and at least once (where nothing waits on a stable
// offset), it says at WARN what the instance waits for, once the wait
// passes stallBound.

// stallMargin is what stallBound allows past the transaction timeout: the
// coordinator's check for timed-out transactions runs every 10s
// (transaction.abort.timed.out.transaction.cleanup.interval.ms), and its
// markers take a moment more.
const stallMargin = 15 * time.Second

// stallBound is how long the instance may make no progress, with records
// waiting, before the watcher says so when it finds no transaction left
// open: the longest a transaction of a crashed producer may keep a
// partition waiting, at this instance's own transaction timeout.
func (r *Runtime) stallBound() time.Duration {
	return max(r.cfg.TransactionTimeout, 10*time.Second) + stallMargin
}

// stallLook is how long the instance may make no progress, with records
// waiting, before the watcher looks for transactions left open. It looks
// well before stallBound: what a coordinator decided is known at once,
// and a transaction whose coordinator may still end it is left alone
// (package hanging decides so from the coordinator, not from how long
// the instance waited), so a look only costs the requests it makes.
// For a minute after Kafka was back (the loop reconnected after a
// failed round, or Kafka answered again after a silence), when a broker
// restart may just have dropped markers, it looks after backLook, and
// the watcher checks every backTick: the tasks reopened on reconnecting,
// so the partitions' clocks started again, and a transaction left open
// would otherwise cost the 10s again after the broker answered.
func (r *Runtime) stallLook() time.Duration {
	look := min(10*time.Second, r.stallBound())
	if r.justBack(time.Now()) {
		look = min(look, backLook)
	}
	return look
}

// justBack reports whether Kafka was back less than a minute ago.
func (r *Runtime) justBack(now time.Time) bool {
	t := r.kafkaBack.Load()
	return t != 0 && now.Sub(time.Unix(0, t)) < time.Minute
}

// stallTick is how often the watcher checks (backTick just after Kafka was
// back); stallRescan how often it looks again while the stall lasts,
// after its first two minutes.
const (
	stallTick   = 5 * time.Second
	stallRescan = 30 * time.Second
	backLook    = 2 * time.Second
	backTick    = time.Second
)

// publishPolled publishes, for the watcher, when each input partition of
// an active task last had records polled, at most once a second. A
// partition with records queued counts as polled (it is paused while they
// wait), and so does a restoring task's (paused until it runs). The loop
// calls it every round, holding r.mu.
func (r *Runtime) publishPolled() {
	now := time.Now()
	restoring := false
	for tp, t := range r.byPart {
		if t.restoring {
			restoring = true
		}
		m, ok := r.polledAt[tp]
		if q := t.queues[tp]; !ok || t.restoring || (q != nil && q.len() > 0) {
			m.at = now
			r.polledAt[tp] = m
		}
	}
	for tp := range r.polledAt {
		if r.byPart[tp] == nil {
			delete(r.polledAt, tp)
		}
	}
	r.restoringNow.Store(restoring)
	if now.Sub(r.polledPublished) < time.Second {
		return
	}
	r.polledPublished = now
	snap := maps.Clone(r.polledAt)
	r.polled.Store(&snap)
}

// Stalled says why the instance cannot make progress though nothing
// fails: Kafka out of its reach (silence.go), or a transaction left open
// that the watcher found and did not repair; nil otherwise.
func (r *Runtime) Stalled() error {
	if err := r.unreachable(time.Now()); err != nil {
		return err
	}
	p := r.hangs.Load()
	if p == nil || len(*p) == 0 {
		return nil
	}
	hs := *p
	msg := fmt.Sprintf("a transaction Kafka left open stops this instance: %v; remedy: %s", hs[0], hs[0].Remedy())
	if len(hs) > 1 {
		msg += fmt.Sprintf(" (and %d more)", len(hs)-1)
	}
	return errors.New(msg)
}

// Hanging lists the transactions left open that the watcher found and did
// not repair, as of its last look.
func (r *Runtime) Hanging() []hanging.Txn {
	if p := r.hangs.Load(); p != nil {
		return slices.Clone(*p)
	}
	return nil
}

// watchStalls runs beside the loop until ctx ends; cl is the instance's
// admin client.
func (r *Runtime) watchStalls(ctx context.Context, cl *kgo.Client) {
	w := &stallWatch{r: r, cl: cl, adm: kadm.NewClient(cl), told: map[string]time.Time{}, restoredAt: time.Now()}
	tick := time.NewTimer(stallTick)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		w.check(ctx)
		if r.justBack(time.Now()) {
			tick.Reset(backTick)
		} else {
			tick.Reset(stallTick)
		}
	}
}

// stallWatch is the watcher's own state.
type stallWatch struct {
	r          *Runtime
	cl         *kgo.Client
	adm        *kadm.Client
	restored   int64     // r.Restored() when last seen changing,
	restoredAt time.Time // at this time
	since      time.Time // the stall seen since (zero: none)
	// quiet: the ends of the idle partitions when they were last found
	// not waiting (nil: none); while the ends stay, nothing new waits.
	quiet      map[topicPartition]int64
	scanned    time.Time // the last look
	told       map[string]time.Time
	waitTold   time.Time
	deniedTold bool
	outOfReach time.Time // since when Kafka has not answered (zero: it answers)
	starting   time.Time // since when the instance has been Starting (zero: it is not)
	// unstable names the partitions whose consumer cannot start because
	// the group's offsets there are unstable, as of the last check, and
	// unstableSince is since when some have been (zero: none).
	unstable      string
	unstableSince time.Time
	// blindSince: since when the lag of idle partitions cannot be read
	// (zero: it can); blindTold: when that was last said.
	blindSince, blindTold time.Time
}

// Stuck says why the instance has not become ready for a long time
// though nothing fails: still without tasks from its group, or a task
// restoring with nothing restored, for stallBound; nil otherwise. The
// watcher sets it every tick.
func (r *Runtime) Stuck() error {
	if p := r.stuck.Load(); p != nil {
		return errors.New(*p)
	}
	return nil
}

// noteStuck sets what Stuck says.
func (w *stallWatch) noteStuck(now time.Time) {
	r := w.r
	st := r.State()
	if st != Starting {
		w.starting = time.Time{}
	} else if w.starting.IsZero() {
		w.starting = now
	}
	var msg string
	switch bound := r.stallBound(); {
	case st == Starting && now.Sub(w.starting) >= bound:
		msg = fmt.Sprintf("the group %s has given this instance no tasks for %v: it has not finished joining (another member slow to rejoin, or the group's offsets unreadable?)",
			r.cfg.Group, now.Sub(w.starting).Round(time.Second))
	case st == Restoring && r.restoringNow.Load() && now.Sub(w.restoredAt) >= bound:
		msg = fmt.Sprintf("a task restores and nothing has been restored for %v", now.Sub(w.restoredAt).Round(time.Second))
	case w.unstable != "" && now.Sub(w.unstableSince) >= bound:
		msg = fmt.Sprintf("the group %s's offsets have been unstable for %v (an offset commit of a transaction waits for its marker), and the consumer cannot start on %s",
			r.cfg.Group, now.Sub(w.unstableSince).Round(time.Second), w.unstable)
	}
	if msg == "" {
		r.stuck.Store(nil)
	} else {
		r.stuck.Store(&msg)
	}
}

func (w *stallWatch) check(ctx context.Context) {
	r := w.r
	now := time.Now()
	w.tellUnreachable(now)
	if n := r.Restored(); n != w.restored || !r.restoringNow.Load() {
		w.restored, w.restoredAt = n, now
	}
	defer w.noteStuck(now)
	switch r.State() {
	case Starting, Restoring, Running:
	default: // Degraded says why itself; the others do not process
		w.noteUnstable(now, "")
		w.over()
		return
	}
	bound, look := r.stallBound(), r.stallLook()
	idle := map[topicPartition]bool{} // the idle partitions, and whether they had records since their task opened
	if p := r.polled.Load(); p != nil {
		for tp, m := range *p {
			if now.Sub(m.at) >= look {
				idle[tp] = m.records
			}
		}
	}
	restoreIdle := now.Sub(w.restoredAt) >= look
	if len(idle) > 0 && w.stillQuiet(ctx, idle) {
		clear(idle)
	}
	if len(idle) == 0 {
		w.noteUnstable(now, "")
	}
	if len(idle) == 0 && !restoreIdle {
		w.over()
		return
	}
	what, strong := "", restoreIdle
	if restoreIdle {
		what = fmt.Sprintf("a task restores and nothing was restored for %v", now.Sub(w.restoredAt).Round(time.Second))
	}
	if len(idle) > 0 {
		behind, sure, unstable, ends, err := w.behind(ctx, idle)
		if err == nil {
			w.noteUnstable(now, unstable)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			// Once, or while it lasts past the bound (at a back-off): a
			// watcher that cannot look is a silent wait.
			if w.blindSince.IsZero() {
				w.blindSince = now
			}
			if blind := now.Sub(w.blindSince) + look; blind >= bound && now.Sub(w.blindTold) >= backoff(blind) {
				w.blindTold = now
				r.log.Warn("no progress, and the lag of the partitions that polled nothing cannot be read", "for", blind.Round(time.Second), "partitions", len(idle), "err", err)
			} else {
				r.log.Debug("partitions polled nothing for a while, and their lag cannot be read", "partitions", len(idle), "err", err)
			}
			return
		}
		w.blindSince = time.Time{}
		if behind != "" {
			what = strings.TrimPrefix(what+"; records wait on partitions that polled nothing for "+look.String()+": "+behind, "; ")
			strong = strong || sure
		} else {
			r.log.Debug("partitions polled nothing for a while, and no record waits on them", "partitions", len(idle))
			w.quiet = ends
		}
	}
	if what == "" {
		w.over()
		return
	}
	if w.since.IsZero() {
		w.since = now
	}
	every := stallTick
	if now.Sub(w.since) > 2*time.Minute {
		every = stallRescan
	}
	if now.Sub(w.scanned) < every {
		return
	}
	w.scanned = now
	waited := now.Sub(w.since) + look
	// Only past stallBound is a wait with nothing found worth a WARN.
	tell := strong && waited >= bound
	if !r.cfg.ExactlyOnce {
		// At least once, nothing waits on a stable offset: a transaction
		// left open holds nothing of this instance's. Say what it waits
		// for.
		if tell && now.Sub(w.waitTold) >= backoff(now.Sub(w.since)) {
			w.waitTold = now
			r.log.Warn("no progress: waiting on Kafka", "for", waited.Round(time.Second), "waiting", what)
		}
		return
	}
	w.scan(ctx, waited, what, tell)
}

// over ends a stall.
func (w *stallWatch) over() {
	if w.since.IsZero() {
		return
	}
	if p := w.r.hangs.Load(); p != nil && len(*p) > 0 {
		w.r.log.Info("processing again after a transaction left open", "stalled_for", time.Since(w.since).Round(time.Second))
	}
	w.since, w.scanned, w.waitTold, w.deniedTold = time.Time{}, time.Time{}, time.Time{}, false
	clear(w.told)
	w.r.hangs.Store(nil)
	w.r.m.hanging.Store(0)
}

// behind says which of the idle partitions have records waiting, and
// how many; empty if none. Records wait beyond a partition's last stable
// offset while a transaction is open there (a read-committed fetch stops
// at it): strong says so. On a partition that has had none polled since
// its task opened, records behind the group's committed offset may wait
// on the group's offsets, which a transaction left open on them keeps
// unstable (the consumer cannot start); or they may be an aborted
// transaction's, which no consumer ever gets past in its committed
// offset, or its last transaction's marker. Only a look at the group's
// offsets tells: such a partition, if a read-committed reader has records
// to read there, is waiting, but not strongly.
//
// A partition whose group's offset is unstable (a fetch that requires
// stable offsets answers UNSTABLE_OFFSET_COMMIT) cannot start at all:
// franz-go retries that fetch without end. That is strong too, and
// unstable names those partitions.
func (w *stallWatch) behind(ctx context.Context, idle map[topicPartition]bool) (what string, strong bool, unstable string, ends map[topicPartition]int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var topics []string
	for tp := range idle {
		if !slices.Contains(topics, tp.topic) {
			topics = append(topics, tp.topic)
		}
	}
	listed, err := w.adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return "", false, "", nil, err
	}
	stable, err := w.adm.ListCommittedOffsets(ctx, topics...)
	if err != nil {
		return "", false, "", nil, err
	}
	parts := kadm.TopicsSet{}
	for tp := range idle {
		parts.Add(tp.topic, tp.partition)
	}
	committed, unstableAt, err := hanging.GroupOffsets(ctx, w.cl, w.r.cfg.Group, parts)
	if err != nil {
		return "", false, "", nil, err
	}
	var unstables []string
	ends = map[topicPartition]int64{}
	var behind []string
	for tp, records := range idle {
		end, ok1 := listed.Lookup(tp.topic, tp.partition)
		if ok1 && end.Err == nil {
			ends[tp] = end.Offset
		}
		lso, ok2 := stable.Lookup(tp.topic, tp.partition)
		if !ok1 || !ok2 || end.Err != nil || lso.Err != nil {
			continue
		}
		at := int64(0)
		if o, ok := committed.Lookup(tp.topic, tp.partition); ok {
			at = o.At
		}
		if !records && unstableAt.Lookup(tp.topic, tp.partition) {
			strong = true
			unstables = append(unstables, fmt.Sprintf("%s[%d]", tp.topic, tp.partition))
			behind = append(behind, fmt.Sprintf("%s[%d] unread: the group's offset there is unstable (a transaction's offset commit waits for its marker)", tp.topic, tp.partition))
			continue
		}
		switch {
		case at >= end.Offset: // read to its end
		case lso.Offset < end.Offset:
			strong = true
			behind = append(behind, fmt.Sprintf("%s[%d] %d records past its last stable offset %d", tp.topic, tp.partition, end.Offset-lso.Offset, lso.Offset))
		case !records:
			// Below the end may be only the last transaction's marker or
			// an aborted tail, which no reader gets past in its offset:
			// then nothing waits.
			if ok, err := hanging.Readable(ctx, w.cl, tp.topic, tp.partition, at, end.Offset); err != nil || ok {
				behind = append(behind, fmt.Sprintf("%s[%d] %d records past the group's offset, none polled", tp.topic, tp.partition, end.Offset-at))
			}
		}
	}
	return fewOf(behind), strong, fewOf(unstables), ends, nil
}

// fewOf lists items, sorted, the first five and how many more.
func fewOf(items []string) string {
	slices.Sort(items)
	if len(items) > 5 {
		items = append(items[:5], fmt.Sprintf("and %d more", len(items)-5))
	}
	return strings.Join(items, ", ")
}

// noteUnstable records which partitions cannot start on the group's
// unstable offsets (none: empty), for Stuck.
func (w *stallWatch) noteUnstable(now time.Time, unstable string) {
	switch {
	case unstable == "":
		w.unstableSince = time.Time{}
	case w.unstable == "":
		w.unstableSince = now
	}
	w.unstable = unstable
}

// stillQuiet reports whether the idle partitions are those last found not
// waiting, with the same ends: no record has come since, so none waits
// (one request, where behind makes three).
func (w *stallWatch) stillQuiet(ctx context.Context, idle map[topicPartition]bool) bool {
	if w.quiet == nil || len(w.quiet) != len(idle) {
		return false
	}
	var topics []string
	for tp := range idle {
		if _, ok := w.quiet[tp]; !ok {
			return false
		}
		if !slices.Contains(topics, tp.topic) {
			topics = append(topics, tp.topic)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	listed, err := w.adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return false
	}
	for tp, end := range w.quiet {
		if o, ok := listed.Lookup(tp.topic, tp.partition); !ok || o.Err != nil || o.Offset != end {
			return false
		}
	}
	return true
}

// scan looks for transactions left open, repairs or reports them; tell:
// the evidence that records wait is sure (behind) and they have waited
// past stallBound, so that finding nothing is said too.
func (w *stallWatch) scan(parent context.Context, idle time.Duration, what string, tell bool) {
	r := w.r
	ctx, cancel := context.WithTimeout(parent, 30*time.Second)
	defer cancel()
	r.log.Debug("no progress: looking for transactions Kafka left open", "for", idle.Round(time.Second), "waiting", what)
	set, err := w.partitions(ctx)
	var found []hanging.Txn
	if err == nil {
		found, err = hanging.FindIn(ctx, w.cl, set)
	}
	if denied := (*hanging.NotAllowedError)(nil); errors.As(err, &denied) {
		if !w.deniedTold {
			w.deniedTold = true
			r.log.Warn("no progress; some partitions cannot be looked at for transactions Kafka left open (grant what engine.ACLs lists)", "err", err)
		}
		err = nil
	}
	if err != nil {
		if parent.Err() == nil { // the look's own timeout is said too
			r.log.Warn("no progress; looking for transactions Kafka left open failed", "for", idle.Round(time.Second), "waiting", what, "err", err)
		}
		return
	}
	if r.cfg.RepairHanging {
		var due []hanging.Txn
		for _, t := range found {
			if t.Decision != hanging.Refuse {
				due = append(due, t)
			}
		}
		repaired, err := hanging.Repair(ctx, w.cl, due)
		for _, t := range repaired {
			r.log.Warn("repaired a transaction Kafka left open: wrote the marker its coordinator decided", txnAttrs(t)...)
			found = slices.DeleteFunc(found, func(f hanging.Txn) bool { return f.Topic == t.Topic && f.Partition == t.Partition })
		}
		if err != nil {
			r.log.Error("repairing transactions Kafka left open", "err", err)
		}
	}
	r.hangs.Store(&found)
	r.m.hanging.Store(int64(len(found)))
	now := time.Now()
	if len(found) == 0 {
		// Records behind the group's offset alone may be an aborted
		// transaction's: say nothing of those.
		if tell && now.Sub(w.waitTold) >= backoff(now.Sub(w.since)) {
			w.waitTold = now
			r.log.Warn("no progress, and no transaction left open found on the instance's partitions: waiting on Kafka", "for", idle.Round(time.Second), "waiting", what)
		}
		return
	}
	for _, t := range found {
		key := fmt.Sprintf("%s[%d] %d/%d@%d", t.Topic, t.Partition, t.ProducerID, t.ProducerEpoch, t.FirstOffset)
		last, ok := w.told[key]
		if ok && now.Sub(last) < backoff(now.Sub(w.since)) {
			continue
		}
		w.told[key] = now
		attrs := append(txnAttrs(t), "remedy", t.Remedy())
		if !r.cfg.RepairHanging && t.Decision != hanging.Refuse {
			attrs = append(attrs, "repair", "off (engine.Config.LeaveHangingTransactions)")
		}
		r.log.Error("a transaction Kafka left open stops this instance", attrs...)
	}
}

// backoff is how long a report waits to be repeated, a stall of d old: a
// minute, doubling to ten.
func backoff(d time.Duration) time.Duration {
	b := time.Minute
	for b < 10*time.Minute && d > 2*b {
		b *= 2
	}
	return min(b, 10*time.Minute)
}

// partitions are those the watcher looks at: every partition of the
// instance's inputs and internal topics, and its group's partition of
// __consumer_offsets. (Not its outputs: a transaction left open there
// holds their readers, not this instance.)
func (w *stallWatch) partitions(ctx context.Context) (kadm.TopicsSet, error) {
	inputs := map[string]bool{}
	if p := w.r.polled.Load(); p != nil {
		for tp := range *p {
			inputs[tp.topic] = true
		}
	}
	set := kadm.TopicsSet{}
	for topic, n := range w.r.plan.partitions {
		if !inputs[topic] && !strings.HasPrefix(topic, w.r.plan.prefix+"-") {
			continue
		}
		for p := range n {
			set.Add(topic, p)
		}
	}
	if err := addOffsetsPartition(ctx, w.adm, w.r.cfg.Group, set); err != nil {
		return nil, err
	}
	return set, nil
}

// addOffsetsPartition adds to set the partition of __consumer_offsets
// that holds group's offsets.
func addOffsetsPartition(ctx context.Context, adm *kadm.Client, group string, set kadm.TopicsSet) error {
	const offsets = "__consumer_offsets"
	td, err := adm.ListTopicsWithInternal(ctx, offsets)
	if err != nil {
		return err
	}
	if d, ok := td[offsets]; ok && d.Err == nil && len(d.Partitions) > 0 {
		set.Add(offsets, hanging.CoordinatorPartition(group, len(d.Partitions)))
	}
	return nil
}

// txnAttrs are a hanging transaction's log attributes.
func txnAttrs(t hanging.Txn) []any {
	return []any{"topic", t.Topic, "partition", t.Partition, "producer_id", t.ProducerID, "producer_epoch", t.ProducerEpoch,
		"first_offset", t.FirstOffset, "age", t.Age(time.Now()), "transactional_id", t.TxnID,
		"coordinator_state", t.State, "decision", t.Decision.String(), "reason", t.Reason}
}

// polledMark is when a partition last had records polled (or counts as
// if it had), and whether it ever had since its task opened.
type polledMark struct {
	at      time.Time
	records bool
}

// stallFields are the Runtime's fields for the watcher (embedded).
type stallFields struct {
	// polledAt: when each input partition of an active task last had
	// records polled (loop only); polled, its copy for the watcher.
	polledAt        map[topicPartition]polledMark
	polledPublished time.Time
	polled          atomic.Pointer[map[topicPartition]polledMark]
	restoringNow    atomic.Bool // a task restores, as of the last round
	hangs           atomic.Pointer[[]hanging.Txn]
	stuck           atomic.Pointer[string] // what Stuck says
	kafkaBack       atomic.Int64           // unix nanos: when Kafka was last back after trouble (stallLook)
}
