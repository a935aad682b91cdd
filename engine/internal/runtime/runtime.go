package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine/internal/assign"
	"github.com/oxbow-dev/oxbow/engine/internal/state"
	"github.com/oxbow-dev/oxbow/engine/internal/topo"
	"github.com/oxbow-dev/oxbow/engine/kafkasec"
)

// State is where an instance is in its life.
type State int32

// The states, in the order an instance goes through them.
const (
	Created State = iota
	Starting
	Restoring // some assigned task is restoring its state: not ready
	Running
	Stopping
	Stopped
	Failed
	// Degraded: Kafka does not answer (a broker restarting or hung); the
	// instance retries until TaskTimeout (see trouble.go). Not ready.
	Degraded
)

func (s State) String() string {
	return [...]string{"created", "starting", "restoring", "running", "stopping", "stopped", "failed", "degraded"}[s]
}

// Runtime is one running instance of an application.
type Runtime struct {
	cfg  Config
	topo *topo.Topology
	log  *slog.Logger
	m    *metrics

	state     atomic.Int32
	workers   atomic.Int32 // SetWorkers; read at each round
	stateMu   sync.Mutex
	listeners []func(State)
	ready     chan struct{}
	readyOnce sync.Once

	// Set up by Run.
	plan     *topicPlan
	db       *state.DB
	shared   atomic.Pointer[shared]
	cl       *kgo.Client
	adm      *kadm.Client
	admCl    *kgo.Client // adm's
	purger   *purger     // the loop's
	balancer *assign.Balancer
	restorer *restorer
	global   *globalTask

	// mu guards tasks and what the rebalance callbacks touch; the loop holds
	// it for a whole round.
	mu         sync.Mutex
	owned      map[string][]int32 // at least once: the partitions assigned (cooperative: added and revoked)
	tasks      map[topo.TaskID]*rtask
	byPart     map[topicPartition]*rtask
	lastCommit time.Time
	commitSoon bool // a task asked for a commit once it has processed what it polled
	// positions: per input partition of an active task, the offset after
	// the last record its committed state reflects (Positions).
	posMu     sync.Mutex
	positions map[topicPartition]int64
	// storePos: per store and partition of an active task, what its
	// committed state reflects, through repartition topics too
	// (positions.go).
	storePos map[string]map[int32]map[topicPartition]int64
	// globalPos: per partition of a global table's topic, the offset after
	// the last record its store has committed.
	globalPos map[topicPartition]int64
	flow      *flowPlan
	// uncommitted: a task processed a record or ran a punctuator since the
	// last commit.
	uncommitted bool
	fatal       error // set by a callback; Run returns it
	skipped     atomic.Pointer[map[string]int64]
	// skippedClosed adds up what the tasks closed so far had skipped as
	// of their last commit (what a task skipped after it is processed
	// again by the task that reopens): Skipped survives a task's reopening.
	skippedClosed map[string]int64
	// nodes counts the records that reached each node, every task's (global
	// ones too), as of the last round; nodesClosed, the tasks closed so far.
	nodes       atomic.Pointer[map[string]int64]
	nodesClosed map[string]int64
	queryable   atomic.Pointer[map[topo.TaskID]bool] // tasks open and restored, as of the last round
	times       streamTimes                          // committed stream times (streamtime.go)
	// unknownTopicSince: since when joining the group fails for a topic
	// missing from the metadata (loop only; zero: it does not).
	unknownTopicSince time.Time
	// troubleSince: since when Kafka has failed the rounds (loop only;
	// zero: it does not); trouble: the last such error (trouble.go).
	troubleSince time.Time
	troubleLast  time.Time // the latest failure of the spell
	// reassigned: the group assigned tasks since the last reconnect (the
	// instance runs again, though Kafka has yet to take a commit).
	reassigned bool
	trouble    atomic.Pointer[error]
	acks       acks       // of the group client's records (flushProduced)
	answers    answers    // Kafka's answers to the group client (silence.go)
	lost       brokerLost // a connection to a broker closed: look for the producer's own transactions left open (own.go)
	// leaveAtTeardown: a clean stop of a static member that leaves.
	leaveAtTeardown bool
	// clCancel ends the group client's context (closeGroupClient).
	clCancel context.CancelFunc

	// Exactly-once: the session, whether a transaction is open (loop only),
	// and what the rebalance callbacks recorded for the loop (eos.go).
	sess          *kgo.GroupTransactSession
	inTxn         bool
	txnBegan      time.Time  // when the open transaction began (loop only)
	phase         groupPhase // where the group's rebalance is (rebalancing.go)
	noTxnDescribe bool       // awaitTxnComplete is off (loop only)
	awaitEnd      bool       // the commit under way awaits its transaction's end (loop only)
	assignMu      sync.Mutex
	assigned      map[string][]int32
	assignChanged bool
	txnDoomed     bool

	stallFields // the stall watcher's (stall.go)

	runOnce sync.Once
	closed  bool // Close was called; guarded by mu
	cancel  context.CancelFunc
	done    chan struct{}
	runErr  error
}

type topicPartition struct {
	topic     string
	partition int32
}

// New prepares an instance; Run starts it.
func New(t *topo.Topology, cfg Config) (*Runtime, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxBufferedRecords <= 0 {
		cfg.MaxBufferedRecords = 10000
	}
	m, err := newMetrics(cfg.Meter, cfg.Group)
	if err != nil {
		return nil, err
	}
	r := &Runtime{
		cfg: cfg, topo: t, log: cfg.Logger.With("group", cfg.Group, "instance", cfg.InstanceID), m: m,
		ready: make(chan struct{}), done: make(chan struct{}),
		tasks: map[topo.TaskID]*rtask{}, byPart: map[topicPartition]*rtask{},
		stallFields: stallFields{polledAt: map[topicPartition]polledMark{}},
	}
	r.workers.Store(int32(cfg.Workers))
	m.workers.Store(int64(cfg.Workers))
	r.restorer = newRestorer(r, r.baseOpts())
	prefix := &topicPlan{prefix: cfg.Group}
	r.balancer = assign.New(assign.Config{Groups: assign.GroupsOf(t, prefix.name), Standbys: max(cfg.Standbys, 0), Metadata: r.memberInfo,
		Warmups: assign.Warmups{Max: max(cfg.MaxWarmups, 0), AcceptableLag: max(cfg.AcceptableLag, 0)}})
	return r, nil
}

// shared is what queries from other goroutines may read once setup is done.
type shared struct {
	plan *topicPlan
	db   *state.DB
}

// State is the instance's current state.
func (r *Runtime) State() State { return State(r.state.Load()) }

// OnStateChange registers a function called (on the loop's goroutine) at
// every state change; it must not block.
func (r *Runtime) OnStateChange(fn func(State)) {
	r.stateMu.Lock()
	defer r.stateMu.Unlock()
	r.listeners = append(r.listeners, fn)
}

// Ready is closed the first time the instance is running with every assigned
// task restored.
func (r *Runtime) Ready() <-chan struct{} { return r.ready }

func (r *Runtime) setState(s State) {
	if State(r.state.Swap(int32(s))) == s {
		return
	}
	r.log.Info("state", "state", s.String())
	if s == Running {
		r.readyOnce.Do(func() { close(r.ready) })
	}
	r.stateMu.Lock()
	ls := slices.Clone(r.listeners)
	r.stateMu.Unlock()
	for _, fn := range ls {
		fn(s)
	}
}

// Run starts the instance and blocks until ctx is cancelled, Close is
// called, or it fails. A clean stop commits, leaves the group (a static
// member only with LeaveOnClose) and returns nil. Run may be called once.
func (r *Runtime) Run(ctx context.Context) error {
	started := false
	r.runOnce.Do(func() { started = true })
	if !started {
		return errors.New("engine: Run was already called, or Close before it")
	}
	defer close(r.done)
	ctx, cancel := context.WithCancel(ctx)
	r.mu.Lock()
	r.cancel = cancel
	closed := r.closed
	r.mu.Unlock()
	defer cancel()
	if closed {
		return nil
	}
	r.setState(Starting)
	err := r.run(ctx)
	if rf := kafkasec.Refused(err); rf != nil {
		err = rf // say what Kafka refused, in words
	}
	if err != nil {
		r.setState(Failed)
		r.log.Error("stopped", "err", err)
	} else {
		r.setState(Stopped)
	}
	r.teardown(err)
	r.runErr = err
	return err
}

// Close stops a running instance and waits until Run has returned.
func (r *Runtime) Close() error {
	r.mu.Lock()
	r.closed = true
	cancel := r.cancel
	r.mu.Unlock()
	if cancel == nil {
		r.runOnce.Do(func() {}) // Run can no longer start
		return nil
	}
	cancel()
	<-r.done
	if errors.Is(r.runErr, context.Canceled) {
		return nil
	}
	return r.runErr
}

func (r *Runtime) run(ctx context.Context) (err error) {
	if err := r.setup(ctx); err != nil {
		return err
	}

	if r.global != nil {
		if err := r.global.bootstrap(ctx); err != nil {
			return err
		}
	}
	r.lastCommit = r.cfg.Now()
	// The stall watcher ends before the loop returns (and teardown closes
	// the admin client it uses).
	wctx, wcancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { r.watchStalls(wctx, r.admCl) })
	defer wg.Wait()
	defer wcancel()
	for {
		if ctx.Err() != nil {
			return r.shutdown()
		}
		if err := r.round(ctx); err != nil {
			if ctx.Err() != nil && errors.Is(err, context.Canceled) {
				return r.shutdown()
			}
			if err := r.rideOut(ctx, err); err != nil {
				if ctx.Err() != nil && errors.Is(err, context.Canceled) {
					return r.shutdown()
				}
				return err
			}
		}
	}
}

// setup creates the clients, checks and creates topics and opens the state.
// The group client comes last: its callbacks may run as soon as it exists.
func (r *Runtime) setup(ctx context.Context) error {
	base := r.baseOpts()
	admCl, err := kgo.NewClient(base...)
	if err != nil {
		return fmt.Errorf("engine: kafka client: %w", err)
	}
	r.adm, r.admCl = kadm.NewClient(admCl), admCl
	if err := kafkasec.Check(ctx, admCl); err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	plan, err := planTopics(ctx, admCl, r.adm, r.topo, r.cfg.Group)
	if err != nil {
		return err
	}
	r.plan = plan
	flow := planFlow(r.topo, plan)
	r.posMu.Lock()
	r.flow = flow // StorePositions reads it
	r.posMu.Unlock()
	r.purger = newPurger(r.topo, plan, r.cfg.PurgeInterval)
	if r.cfg.DeadLetterTopic != "" {
		if err := ensureTopic(ctx, r.adm, r.cfg.DeadLetterTopic); err != nil {
			return err
		}
		plan.partitions[r.cfg.DeadLetterTopic] = 1
	}
	r.db, err = state.Open(r.cfg.StateDir, state.Options{
		CacheSize:    r.cfg.BlockCacheBytes,
		MemTableSize: uint64(r.cfg.MemTableBytes),
		ChangelogTopic: func(store string) string {
			return plan.name(topo.TopicRef{Name: topo.ChangelogTopic(store), Internal: true})
		},
		Logger: r.log,
		Layout: func(store string) state.Layout { return state.LayoutOf(r.topo.Stores[store]) },
	})
	if err != nil {
		return err
	}
	r.m.db.Store(r.db)
	if subs := r.globalSubs(); len(subs) > 0 {
		if r.global, err = newGlobalTask(r, subs, base); err != nil {
			return err
		}
	}
	r.shared.Store(&shared{plan: plan, db: r.db})
	if err := r.dropOldStores(plan); err != nil {
		return err
	}

	return r.newGroupClient(ctx)
}

// newGroupClient creates the group client (the transactional session
// under exactly-once) and, under exactly-once, initializes its producer
// id. Setup calls it, and the loop again when it replaces a client that
// lost its broker (trouble.go).
func (r *Runtime) newGroupClient(ctx context.Context) error {
	var err error
	// What the replaced client's join and callbacks left noted is not the
	// new client's (a join cut off by a broker that went away).
	r.phase.reset()
	groups := assign.GroupsOf(r.topo, r.plan.name)
	var topics []string
	for _, g := range groups {
		topics = append(topics, g.Topics...)
	}
	// The client's own context, which closeGroupClient ends when a leave
	// or a close waits on a join in flight (see there).
	cctx, ccancel := context.WithCancel(context.Background())
	r.clCancel = ccancel
	opts := append(r.baseOpts(),
		kgo.WithContext(cctx),
		kgo.ConsumerGroup(r.cfg.Group),
		kgo.ConsumeTopics(topics...),
		// Cooperative, or eager while an instance of an older Oxbow
		// in the group speaks only that.
		kgo.Balancers(r.balancer, r.balancer.Cooperative(), r.balancer.Eager()),
		kgo.BlockRebalanceOnPoll(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.MaxBufferedRecords(1<<20),
		kgo.OnOffsetsFetched(r.times.onOffsetsFetched),
		kgo.WithHooks(&r.acks, &r.answers, &r.phase, &r.lost),
	)
	if r.cfg.StaticMember {
		opts = append(opts, kgo.InstanceID(r.cfg.InstanceID))
	}
	if r.cfg.SessionTimeout > 0 {
		// Heartbeats a third of the session apart, as Kafka advises
		// (franz-go's default, 3s, is only right for its default session).
		opts = append(opts, kgo.SessionTimeout(r.cfg.SessionTimeout), kgo.HeartbeatInterval(min(3*time.Second, r.cfg.SessionTimeout/3)))
	}
	if !r.cfg.ExactlyOnce {
		opts = append(opts,
			kgo.DisableAutoCommit(),
			kgo.OnPartitionsAssigned(r.onAssigned),
			kgo.OnPartitionsRevoked(r.onRevoked),
			kgo.OnPartitionsLost(r.onLost),
		)
		if r.cl, err = kgo.NewClient(opts...); err != nil {
			return fmt.Errorf("engine: kafka client: %w", err)
		}
		return nil
	}
	opts = append(opts,
		kgo.TransactionalID(r.cfg.TransactionalID),
		kgo.TransactionTimeout(r.cfg.TransactionTimeout),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.OnPartitionsAssigned(r.onAssignedEOS),
		kgo.OnPartitionsRevoked(r.onRevokedEOS),
		kgo.OnPartitionsLost(r.onLostEOS),
		kgo.OnPartitionsCallbackBlocked(r.phase.onCallbackBlocked),
	)
	if r.sess, err = kgo.NewGroupTransactSession(opts...); err != nil {
		return fmt.Errorf("engine: kafka client: %w", err)
	}
	r.cl = r.sess.Client()
	// Initialize the producer id now: that fences a previous incarnation of
	// this instance and aborts the transaction it left open, which would
	// otherwise hold back every read-committed reader of its topics (our
	// own restores included) until the transaction timeout.
	done := r.waiting("the transaction coordinator to give " + r.cfg.TransactionalID + " its producer id (InitProducerID)")
	pid, epoch, err := r.cl.ProducerID(ctx)
	done()
	if err != nil {
		return fmt.Errorf("engine: initialize the transactional producer %s: %w", r.cfg.TransactionalID, err)
	}
	// This look stands for the one the first transaction would make
	// after the replaced client's connections closed (beginTxn); a
	// disconnect during it asks for another.
	r.lost.Store(false)
	return r.endOwnLeftOpen(ctx, pid, epoch)
}

// leaveTimeout bounds how long leaving the group and closing the group
// client wait before they abandon a join in flight.
const leaveTimeout = 10 * time.Second

// closeGroupClient closes the group client, allowing the final rebalance.
// A close waits for a join in flight, which franz-go does not interrupt
// and the group may hold for its rebalance timeout (measured: a Close
// during a join that waited for a crashed static member took 42s); after
// leaveTimeout the client's context is ended, which fails the join.
func (r *Runtime) closeGroupClient() {
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.cl.CloseAllowingRebalance()
	}()
	select {
	case <-done:
	case <-time.After(leaveTimeout):
		r.log.Warn("closing the Kafka client: a join in flight holds it; abandoning the join", "after", leaveTimeout)
		r.clCancel()
		<-done
	}
	r.clCancel()
}

func (r *Runtime) baseOpts() []kgo.Opt {
	return append([]kgo.Opt{
		kgo.SeedBrokers(r.cfg.Brokers...),
		// franz-go retries a produce that failed with a retriable error
		// (CONCURRENT_TRANSACTIONS, which a transaction's first records get
		// when it starts while the broker still writes the last one's
		// markers) after a metadata refresh, which its default minimum
		// metadata age (5s) holds back: measured, commits stalled for up to
		// 5s (a command round trip's p99 4.8s). At 50ms the aggregate's
		// concurrent submits ran at 510/s, at 10ms at 870/s; 100ms keeps the
		// stall short without letting every client of a busy broker refresh
		// a hundred times a second while topics are created or move.
		// KafkaOptions may say otherwise.
		kgo.MetadataMinAge(100 * time.Millisecond),
		// Fetch from the nearest replica where the brokers allow it
		// (KIP-392); without a rack, from the leader.
		kgo.Rack(r.cfg.Rack),
	}, r.cfg.KafkaOpts...)
}

func (r *Runtime) globalSubs() []*topo.SubTopology {
	var subs []*topo.SubTopology
	for _, s := range r.topo.Subs {
		if s.Global {
			subs = append(subs, s)
		}
	}
	return subs
}

func ensureTopic(ctx context.Context, adm *kadm.Client, topic string) error {
	d, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return fmt.Errorf("engine: list topic %s: %w", topic, err)
	}
	if t, ok := d[topic]; ok && t.Err == nil {
		return nil
	}
	resp, err := adm.CreateTopic(ctx, 1, -1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !isExists(err) {
		return fmt.Errorf("engine: create dead-letter topic %s: %w", topic, err)
	}
	return nil
}

// round is one turn of the loop: poll, restore, process, punctuate, commit.
func (r *Runtime) round(ctx context.Context) error {
	// While a task restores, the inputs of the restoring tasks are paused
	// and the restore's own poll does the waiting: a poll of the inputs
	// that waited too would leave the restore idle for a third of the
	// time (100ms of every 300ms round).
	wait := 100 * time.Millisecond
	r.mu.Lock() // the rebalance callbacks add and remove restores
	if r.restorer.restoring() {
		wait = time.Millisecond
	}
	r.mu.Unlock()
	pollCtx, cancel := context.WithTimeout(ctx, wait)
	// Everything the client has fetched, not a number of records: a fetch
	// response brings several partitions' records, and a round's workers
	// can share only the tasks that have records. Polling 5,000 records a
	// round took them mostly from one partition: a second worker gained
	// nothing on a CPU-heavy map (BenchmarkWorkers: 3.7s with one worker,
	// 3.6–3.9s with two; polling everything, 2.2–2.5s with two).
	fetches := r.cl.PollFetches(pollCtx)
	cancel()
	defer r.allowRebalance()
	if h := polledHook.Load(); h != nil {
		(*h)(r, fetches.NumRecords())
	}
	if fetches.IsClientClosed() {
		return context.Canceled
	}
	if err := r.fetchErrors(fetches, "fetch"); err != nil {
		return err
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fatal != nil {
		return r.fatal
	}
	if r.cfg.ExactlyOnce {
		rewound, err := r.reconcileEOS(ctx)
		if err != nil {
			return err
		}
		if rewound {
			fetches = nil // polled before the rewind: they come again
		}
	}
	var orphans map[string]map[int32]kgo.EpochOffset
	polled := time.Now()
	fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
		tp := topicPartition{fp.Topic, fp.Partition}
		t := r.byPart[tp]
		if t != nil {
			if len(fp.Records) > 0 {
				r.polledAt[tp] = polledMark{at: polled, records: true}
			}
			t.enqueue(fp)
			return
		}
		// Revoked since the fetch. Under exactly-once the session would
		// commit these records as consumed: rewind (SetOffsets skips a
		// partition no longer assigned).
		if r.cfg.ExactlyOnce && len(fp.Records) > 0 {
			if orphans == nil {
				orphans = map[string]map[int32]kgo.EpochOffset{}
			}
			if orphans[fp.Topic] == nil {
				orphans[fp.Topic] = map[int32]kgo.EpochOffset{}
			}
			orphans[fp.Topic][fp.Partition] = kgo.EpochOffset{Epoch: -1, Offset: fp.Records[0].Offset}
		}
	})
	if len(orphans) > 0 {
		r.log.Warn("records polled for partitions without a task; rewinding them", "partitions", orphans)
		r.cl.SetOffsets(orphans)
	}
	if r.global != nil {
		if err := r.global.poll(ctx); err != nil {
			return err
		}
	}
	if err := r.restorer.step(ctx); err != nil {
		return err
	}
	r.publishQueryable() // before the state says Running
	r.updateState()
	if r.cfg.ExactlyOnce {
		if err := r.beginTxn(ctx); err != nil {
			return err
		}
	}
	if err := r.processAll(ctx); err != nil {
		return err
	}
	r.applyBackpressure()
	r.publish()
	// Commit every interval, and as soon as the input runs dry: then the
	// updates waiting in the record cache go out after one empty poll
	// instead of up to an interval later (30s by default at least once),
	// which costs nothing under load (a poll always finds records) and caps
	// the commits of an idle instance at one per poll that follows some
	// work.
	idle := r.uncommitted && fetches.NumRecords() == 0 && r.drained()
	// A processor may ask for a commit (a command's caller waits for it):
	// then commit once what was polled is processed.
	for _, t := range r.tasks {
		r.commitSoon = t.t.TakeCommitRequest() || r.commitSoon
	}
	soon := idle || (r.commitSoon && r.drained())
	if r.commitDue(soon || r.cfg.Now().Sub(r.lastCommit) >= r.cfg.CommitInterval) {
		r.commitSoon = false
		// Someone may wait for what this commit makes visible, and the
		// next records come soon after: they go out once Kafka has
		// finished this transaction (awaitTxnComplete).
		r.awaitEnd = soon
		// A commit that has begun finishes even if Close cancels ctx
		// meanwhile (its waits are bounded by flushTimeout): cut short, an
		// exactly-once commit would abort and leave the work to be done
		// again.
		if err := r.commitLocked(context.WithoutCancel(ctx)); err != nil {
			return err
		}
	}
	return nil
}

// drained: no task holds records it has not processed.
func (r *Runtime) drained() bool {
	for _, t := range r.tasks {
		if t.buffered > 0 {
			return false
		}
	}
	return true
}

func (r *Runtime) updateState() {
	if r.State() == Stopping || r.balancer.Current().Generation < 0 {
		return // not in the group yet
	}
	if !r.troubleSince.IsZero() && !r.reassigned {
		return // Degraded until the group assigns the tasks again
	}
	for _, t := range r.tasks {
		if t.restoring {
			r.setState(Restoring)
			return
		}
	}
	r.setState(Running)
}

// processAll lets the workers process every task with work; a task goes to
// one worker.
func (r *Runtime) processAll(ctx context.Context) error {
	var work []*rtask
	now := r.cfg.Now()
	for _, t := range r.tasks {
		if !t.restoring && (t.buffered > 0 || t.hasPunctuation(now)) {
			work = append(work, t)
		}
	}
	if len(work) == 0 {
		return nil
	}
	r.uncommitted = true
	return r.onWorkers(work, func(t *rtask) error { return t.run(ctx, now) })
}

// onWorkers runs fn for every task, on up to Workers goroutines (as set
// when it is called: see SetWorkers); a task goes to one of them. It
// returns the errors joined; a worker stops at its first. A panic that
// escapes fn (user code panicking where no record is to blame, say while
// the record cache flushes at a commit) becomes that worker's error, a
// *PanicError, rather than ending the process.
func (r *Runtime) onWorkers(tasks []*rtask, fn func(*rtask) error) error {
	safe := func(t *rtask) error {
		return r.guard("task "+t.id.String(), func() error { return fn(t) })
	}
	workers := min(int(r.workers.Load()), len(tasks))
	if workers <= 1 {
		for _, t := range tasks {
			if err := safe(t); err != nil {
				return err
			}
		}
		return nil
	}
	ch := make(chan *rtask, len(tasks))
	for _, t := range tasks {
		ch <- t
	}
	close(ch)
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for i := range workers {
		wg.Go(func() {
			for t := range ch {
				if err := safe(t); err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// SetWorkers sets the number of goroutines that process the instance's
// tasks, from the next round on. The work of a round (its tasks' buffered
// records) is shared among the workers afresh every round, so the change
// moves no partition, needs no rebalance, and loses or repeats nothing: a
// round in progress finishes with the workers it began with.
func (r *Runtime) SetWorkers(n int) error {
	if n <= 0 {
		return fmt.Errorf("engine: SetWorkers(%d): at least one worker", n)
	}
	n = min(n, math.MaxInt32)
	r.workers.Store(int32(n))
	r.m.workers.Store(int64(n))
	r.log.Info("workers set", "workers", n)
	return nil
}

// Workers is the number of worker goroutines (Config.Workers, or as
// SetWorkers last set it).
func (r *Runtime) Workers() int { return int(r.workers.Load()) }

// applyBackpressure pauses the partitions of tasks with full queues and
// resumes the others. A full task's empty partitions stay fetched: the task
// may be waiting for their records (behind), which would never come.
func (r *Runtime) applyBackpressure() {
	pause, resume := map[string][]int32{}, map[string][]int32{}
	for _, t := range r.tasks {
		full := t.buffered >= r.cfg.MaxBufferedRecords
		for tp, q := range t.queues {
			p := t.restoring || full && q.len() > 0
			if p == q.paused {
				continue
			}
			q.paused = p
			if p {
				pause[tp.topic] = append(pause[tp.topic], tp.partition)
			} else {
				resume[tp.topic] = append(resume[tp.topic], tp.partition)
			}
		}
	}
	if len(pause) > 0 {
		r.cl.PauseFetchPartitions(pause)
	}
	if len(resume) > 0 {
		r.cl.ResumeFetchPartitions(resume)
	}
}

// shutdown commits and closes every task and leaves the group (a static
// member only with LeaveOnClose, at teardown).
func (r *Runtime) shutdown() error {
	r.setState(Stopping)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r.mu.Lock()
	err := r.commitLocked(ctx)
	if brokerTrouble(err) {
		// Kafka refused the last commit: the broker aborted the
		// transaction (it outlived TransactionTimeout), the group moved
		// on, or Kafka is away. Nothing is lost: the tasks' next owner
		// processes again what this instance did since its last commit.
		// The stop is as clean as Kafka Streams' (whose shutdown closes
		// such tasks dirty and ends without an error), unless another
		// instance took this one's id.
		if isFenced(err) && r.takenOver(ctx) {
			err = r.fencedInstance(err)
		} else {
			r.log.Warn("stopping without the last commit: Kafka refused it; the tasks' next owner processes their records since the commit before", "err", err)
			err = nil
		}
	}
	r.closeTasksLocked(slices.Collect(maps.Keys(r.tasks)))
	if err == nil {
		err = r.fatal // a processor's Close that panicked
	}
	r.mu.Unlock()
	// A static member's client stops its membership here without a word
	// to the coordinator: the group keeps its tasks for it until
	// SessionTimeout, for a restart.
	lctx, lcancel := context.WithTimeout(ctx, leaveTimeout)
	lerr := r.cl.LeaveGroupContext(lctx)
	lcancel()
	if lerr != nil {
		// franz-go's leave waits for a join in flight, which the group
		// holds until every member has joined: up to the rebalance
		// timeout while members that are gone still count. Ending the
		// client's context ends the join.
		r.log.Warn("leave group: no answer; abandoning the join in flight", "err", lerr, "after", leaveTimeout)
		r.clCancel()
	}
	// Leaving as a static member (LeaveOnClose) waits for teardown, after
	// the client is closed: one still running would join again.
	r.leaveAtTeardown = r.cfg.StaticMember && r.cfg.LeaveOnClose
	return err
}

// leaveStatic removes this static member from its group (a LeaveGroup
// naming its group.instance.id), so that the group rebalances at once and
// its tasks move.
func (r *Runtime) leaveStatic(ctx context.Context) {
	resp, err := r.adm.LeaveGroup(ctx, kadm.LeaveGroup(r.cfg.Group).InstanceIDs(r.cfg.InstanceID).Reason("the instance closed and leaves its tasks to the others"))
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		r.log.Warn("leave group", "err", err)
		return
	}
	r.log.Info("left the group", "instance", r.cfg.InstanceID)
}

func (r *Runtime) teardown(err error) {
	defer r.m.close()
	// A fenced instance leaves its transaction alone: another instance
	// with its id owns the transactional id now, and an abort would try
	// to take it back (franz-go bumps the producer epoch when an abort is
	// refused), fencing that one in turn.
	if r.inTxn && !isFenced(err) {
		// A failed instance: abort what it began, rather than leave the
		// broker to time the transaction out.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		done := r.waiting("the transaction coordinator to abort the transaction of " + r.cfg.TransactionalID + " as the instance stops")
		if _, err := r.sess.End(ctx, kgo.TryAbort); err != nil {
			r.log.Warn("abort the transaction", "err", err)
		}
		done()
		cancel()
		r.inTxn = false
	}
	if r.cl != nil {
		r.closeGroupClient()
	}
	if r.leaveAtTeardown {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		r.leaveStatic(ctx)
		cancel()
	}
	if r.restorer != nil {
		r.restorer.close()
	}
	if r.global != nil {
		r.global.close()
	}
	r.mu.Lock()
	r.closeTasksLocked(slices.Collect(maps.Keys(r.tasks)))
	r.mu.Unlock()
	if r.adm != nil {
		r.adm.Close()
	}
	if r.db != nil {
		r.m.db.Store(nil)
		if err := r.db.Close(); err != nil {
			r.log.Warn("close state", "err", err)
		}
	}
}

// dropOldStores wipes the local partitions of stores the topology no longer
// has (a store renamed, or one an earlier version of Oxbow kept, such as a
// windowed aggregation's "-expiry" index): nothing reads them again, and
// they would take disk space for good.
func (r *Runtime) dropOldStores(p *topicPlan) error {
	parts, err := r.db.Stores()
	if err != nil {
		return err
	}
	for _, sp := range parts {
		if p.storeSub[sp.Store] != nil {
			continue
		}
		r.log.Info("deleting the local state of a store the topology does not have", "store", sp.Store, "partition", sp.Partition)
		if err := r.db.Wipe(sp.Store, sp.Partition); err != nil {
			return err
		}
	}
	return nil
}

// memberInfo is what this instance tells the group leader when it joins.
func (r *Runtime) memberInfo() assign.MemberInfo {
	cur := r.balancer.Current()
	info := assign.MemberInfo{InstanceID: r.cfg.InstanceID, Addr: r.cfg.AdvertisedAddr, Tags: r.cfg.Tags, Active: cur.Active, Standby: cur.Standby, OffsetSums: map[topo.TaskID]int64{}}
	if r.db == nil || r.plan == nil {
		return info
	}
	parts, err := r.db.Stores()
	if err != nil {
		r.log.Warn("list local state", "err", err)
		return info
	}
	for _, sp := range parts {
		sub := r.plan.storeSub[sp.Store]
		if sub == nil || sub.Global || !sp.HasCheckpoint {
			continue
		}
		id := topo.TaskID{Sub: sub.ID, Partition: sp.Partition}
		info.OffsetSums[id] += sp.Offset
	}
	return info
}

func (r *Runtime) fail(err error) {
	if r.fatal == nil {
		r.fatal = err
	}
}

// ActiveTasks lists the tasks the group assigned to this instance in its
// latest generation, as "<sub-topology>_<partition>".
func (r *Runtime) ActiveTasks() []string {
	var ids []string
	for _, id := range r.balancer.Current().Active {
		ids = append(ids, id.String())
	}
	slices.Sort(ids)
	return ids
}

// fetchErrors logs the errors of a poll and returns those the client will
// not retry by itself, joined; the end of a poll's deadline is no error.
func (r *Runtime) fetchErrors(fetches kgo.Fetches, what string) error {
	var errs error
	unknown := false
	fetches.EachError(func(topic string, p int32, err error) {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return
		}
		if errors.Is(err, assign.ErrUnknownTopic) {
			// The group leader's metadata lacks a topic the instance
			// found at start: a topic created a moment ago that has not
			// reached every broker, or one deleted since. The client
			// joins again; fail only if it lasts.
			unknown = true
			if r.unknownTopicSince.IsZero() {
				r.unknownTopicSince = r.cfg.Now()
			}
			if r.cfg.Now().Sub(r.unknownTopicSince) < unknownTopicPatience {
				r.log.Warn("a topic of the topology is not in the cluster metadata yet; joining the group again", "err", err)
				return
			}
		}
		r.log.Warn(what, "topic", topic, "partition", p, "err", err)
		if errors.Is(err, kerr.FencedInstanceID) {
			errs = errors.Join(errs, r.fencedInstance(err))
			return
		}
		switch {
		case kgoRetriable(err):
		case topic == "": // the group's, not a partition's
			errs = errors.Join(errs, fmt.Errorf("engine: %s: the consumer group %s: %w", what, r.cfg.Group, err))
		default:
			errs = errors.Join(errs, fmt.Errorf("engine: %s %s[%d]: %w", what, topic, p, err))
		}
	})
	if !unknown && what == "fetch" {
		r.unknownTopicSince = time.Time{}
	}
	return errs
}

// unknownTopicPatience is how long the group may go on lacking a topic of
// the topology in its metadata before the instance fails.
const unknownTopicPatience = 30 * time.Second
