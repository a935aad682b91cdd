package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/oxbow-dev/oxbow/engine/hanging"
	"github.com/oxbow-dev/oxbow/engine/internal/assign"
	"github.com/oxbow-dev/oxbow/engine/internal/runtime"
	"github.com/oxbow-dev/oxbow/engine/internal/topo"
	"github.com/oxbow-dev/oxbow/engine/kafkasec"
	"github.com/oxbow-dev/oxbow/engine/record"
)

// Guarantee is the processing guarantee of an application.
type Guarantee int

const (
	// DefaultGuarantee, the zero value, is ExactlyOnce for a topology
	// that decides (an aggregate's commands, a process manager's actions:
	// Builder.DecidesExactlyOnce) and AtLeastOnce for any other.
	DefaultGuarantee Guarantee = iota
	// AtLeastOnce commits input offsets only after every output and
	// changelog record of the processed inputs is acknowledged; after a
	// crash, inputs since the last commit are processed again.
	AtLeastOnce
	// ExactlyOnce commits outputs, changelogs and input offsets in one Kafka
	// transaction, and reads inputs read-committed: after a crash or a
	// rebalance, every input record has affected outputs and state exactly
	// once. A crashed instance's open transaction is aborted as soon as an
	// instance with the same InstanceID starts (or after
	// TransactionTimeout); a zombie instance that lost its tasks is fenced
	// by the group generation. A record that cannot be produced aborts the
	// whole transaction, so OnProductionError must be Fail.
	ExactlyOnce
)

// String names the guarantee as Kafka Streams' processing.guarantee does.
func (g Guarantee) String() string {
	switch g {
	case DefaultGuarantee:
		return "default"
	case AtLeastOnce:
		return "at_least_once"
	case ExactlyOnce:
		return "exactly_once_v2"
	}
	return fmt.Sprintf("Guarantee(%d)", int(g))
}

// ErrorPolicy says what happens to a record that fails to decode, to
// process or to be produced. An error that is not the record's fault, a
// serde's wrapping [serde.ErrUnavailable] (a schema registry that cannot be
// reached), is never skipped or dead-lettered: it stops the instance as
// Fail does.
type ErrorPolicy int

const (
	// Fail stops the instance with the error. Nothing after the last commit
	// is committed, so the record is read again after a restart. The default.
	Fail ErrorPolicy = iota
	// Skip logs the error, counts the record in oxbow.records.dropped and
	// goes on.
	Skip
	// DeadLetter writes the record as it was read to Config.DeadLetterTopic,
	// with headers HeaderError, HeaderTopic, HeaderPartition, HeaderOffset
	// and HeaderStage, counts it, and goes on.
	DeadLetter
)

// Headers of a record on the dead-letter topic, added after the headers it
// had: why and where it failed (package record documents their values).
const (
	HeaderError     = record.HeaderError     // the error's text
	HeaderTopic     = record.HeaderTopic     // the topic it was read from
	HeaderPartition = record.HeaderPartition // its partition, in decimal
	HeaderOffset    = record.HeaderOffset    // its offset, in decimal
	HeaderStage     = record.HeaderStage     // "decode", "process", "produce" or "late"
)

// Config configures an application instance. Zero fields take the defaults
// their docs give.
type Config struct {
	// AppID names the application: its consumer group and the prefix of its
	// internal topics. Required.
	AppID string
	// Version, if set, is part of the group and prefix ("<AppID>-<Version>"),
	// so two versions of an application run side by side.
	Version string
	// Brokers are the Kafka seed brokers. Required.
	Brokers []string
	// Batch runs the application as a job: Run notes the end offsets of the
	// topology's source topics when it starts and returns nil once the
	// group has committed them all, and the records they caused in the
	// internal repartition topics are processed too. Records that arrive
	// meanwhile may be processed as well. Every instance of the group
	// stops and leaves the group (see LeaveGroupOnClose); a later Run goes
	// on from there (a periodic job).
	Batch bool
	// StateDir is where the instance keeps its local state. Every instance
	// needs its own. Default: <os.TempDir()>/oxbow/<group>/<InstanceID>.
	StateDir string
	// InstanceID names the instance stably across restarts; the group's
	// assignment gives an instance back the tasks whose state it holds, and
	// with ExactlyOnce it names the instance's transactions. Default: the id
	// kept in StateDir (file oxbow-instance-id, created with a random id the
	// first time) when StateDir is set, else a random id.
	//
	// A stable id (given, or kept in StateDir) makes the instance a static
	// member of its group (KIP-345, Kafka's group.instance.id): restarted
	// after a crash within SessionTimeout, it takes its tasks back at once,
	// with no rebalance, and a rolling restart moves nothing. The price is
	// Kafka's: an instance that dies and stays dead keeps its tasks for
	// SessionTimeout before they move. Two instances of a group must never
	// share an id; the later one takes the place of the earlier, which
	// stops with an error naming the id. A random id joins as a dynamic
	// member, as every restart is a new instance anyway.
	InstanceID string
	// LeaveGroupOnClose: a clean Close of a static member (see InstanceID)
	// leaves the group, so that its tasks move to the other instances at
	// once (scaling down for good). Default false: it keeps its tasks for a
	// restart within SessionTimeout, as Kafka Streams' static members do,
	// and they move only if it does not come back by then. A dynamic member
	// always leaves.
	LeaveGroupOnClose bool
	// Guarantee: default ExactlyOnce for a topology that decides
	// (Topology.Decides), AtLeastOnce for any other.
	Guarantee Guarantee
	// CommitInterval is how often the instance commits. Default: 30s with
	// AtLeastOnce, 100ms with ExactlyOnce (Kafka Streams' defaults). It also
	// commits as soon as its input runs dry (a poll finds no record and
	// every fetched record is processed): the updates held in the record
	// cache wait for the next commit, so under load results come out once
	// an interval, and after the last input within about 100ms.
	CommitInterval time.Duration
	// PurgeInterval is how often the instance deletes the records of its
	// repartition topics that it has committed (Kafka's DeleteRecords):
	// the topics keep records however old their timestamps, so that
	// reprocessing history loses nothing to the broker's retention, and
	// this keeps them small. Default: 30s (Kafka Streams'
	// repartition.purge.interval.ms).
	PurgeInterval time.Duration
	// TransactionTimeout (ExactlyOnce): how long the broker keeps a
	// transaction of a crashed instance open before aborting it, blocking
	// read-committed readers of its topics meanwhile. Default: 10s.
	TransactionTimeout time.Duration
	// CacheBytes bounds the instance's record cache, shared by its tasks;
	// negative disables it. Default: 10 MiB, or MemoryBudget's share.
	CacheBytes int64
	// MemoryBudget is the memory the instance may use, in bytes, divided
	// between pebble's block cache (1/4) and memtables (1/8), the record
	// cache (1/16, unless CacheBytes is set), each Kafka fetch (1/16) and a
	// soft limit on the Go heap (5/8, the rest: GOMEMLIMIT, process-wide,
	// the sum of the running Apps' shares; not set if the process has a
	// limit of its own). The resident set stays near the budget whatever
	// the state's size: the store's data past the block cache stays on disk
	// (and in the kernel's page cache, which is not the process's). At
	// least 64 MiB. Default 0: no budget, each part at its own default — a
	// 64 MiB block cache, 16 MiB memtables, a 10 MiB record cache,
	// franz-go's 50 MiB fetches, no heap limit.
	MemoryBudget int64
	// StandbyReplicas is the number of warm copies of each task's state kept
	// on other instances (as many as there are other instances, at most):
	// standby tasks follow the changelogs of the task's persistent stores,
	// and the group moves a task to an instance that has its state, so that
	// failover restores only the few records the standby had not applied.
	// Default 0.
	StandbyReplicas int
	// MaxWarmupReplicas bounds the warm-up replicas of the group at a time
	// (Kafka Streams' max.warmup.replicas): a task that a rebalance would
	// move to an instance whose state of it is more than
	// AcceptableRecoveryLag records behind stays where it runs, and the new
	// instance restores a warm-up copy of it meanwhile (a standby); once
	// the copy has caught up, the instance asks for a rebalance (Kafka
	// Streams' probing rebalance) and the task moves, its restore down to
	// the last few records. So scaling out never stalls a task behind a
	// restore. A task whose instance has left goes to an instance whose
	// state of it is caught up (its standby's, say), even past its share,
	// while the instance the balance chooses warms up. Default 2; negative: none, a task moves at once and its new
	// owner restores it before processing. Every instance of the group
	// must run a version with warm-ups for the group to use them.
	MaxWarmupReplicas int
	// AcceptableRecoveryLag is how many changelog records behind its
	// previous owner (or, if that has left, the most caught-up instance)
	// an instance's state of a task may be for the task to move to it at
	// once (Kafka Streams' acceptable.recovery.lag). Default
	// 10,000; negative: 0.
	AcceptableRecoveryLag int64
	// Workers is the number of goroutines processing tasks. Default:
	// GOMAXPROCS. [App.SetWorkers] changes it while the instance runs.
	Workers int
	// MaxTaskIdle is how long a task with several input partitions waits for
	// an empty one that has data on the broker, to keep timestamp order
	// across them. Default: 0, do not wait.
	MaxTaskIdle time.Duration
	// AdvertisedAddr is the host:port where this instance serves HTTP; the
	// group tells every instance which one owns a key. Default: none.
	AdvertisedAddr string
	// Rack is where the instance runs (a rack, an availability zone):
	// the client tag "rack" (see Tags), and the rack its Kafka clients
	// fetch from, so that where brokers have replica.selector.class set to
	// a rack-aware selector (KIP-392) they read from the nearest replica.
	Rack string
	// Tags are the instance's client tags, such as {"zone": "eu-1a",
	// "cluster": "k1"} (Kafka Streams' client.tag.*). The group places each
	// standby replica on an instance whose tags differ from those of the
	// task's active instance (and of its other standbys) in as many tags
	// as possible, before it balances standby counts; App.Assignment says
	// why each standby sits where it does. Default: none (with Rack, just
	// the rack).
	Tags map[string]string
	// Logger: default slog.Default().
	Logger *slog.Logger
	// TracerProvider and MeterProvider: default no-op. Trace context travels
	// in W3C traceparent headers from input records to output records.
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	// KafkaSecurity is how the instance reaches a secured Kafka (TLS,
	// mTLS, SASL); kafkasec.Flags reads it from the flags and environment
	// every Oxbow command takes. Run checks it against the cluster first:
	// an untrusted certificate or a wrong password stops it at once with
	// an error that says so.
	KafkaSecurity kafkasec.Config
	// KafkaOptions are passed to every Kafka client, after KafkaSecurity's.
	KafkaOptions []kgo.Opt
	// SessionTimeout of the consumer group: how long before the tasks of a
	// crashed instance that has not come back move. Default: franz-go's
	// and Kafka Streams' (45s).
	SessionTimeout time.Duration
	// TaskTimeout is how long the instance rides out a Kafka that does not
	// answer (a broker restarting or hung, a coordinator moving: a commit,
	// produce or fetch that fails for want of a broker) before it stops
	// with an error naming what was unreachable; meanwhile it retries,
	// under ExactlyOnce aborting the open transaction and processing the
	// interval again, and its state is Degraded. Kafka Streams'
	// task.timeout.ms. Default: 5m.
	TaskTimeout time.Duration
	// LeaveHangingTransactions: report the transactions Kafka left open on
	// the instance's partitions without ending them. By default an
	// instance that has polled nothing from a partition for 10s while
	// records wait there looks for such transactions (package hanging)
	// and ends each with the marker its coordinator decided, which needs
	// ClusterAction on the cluster (ACLs lists it); what it cannot decide
	// it reports either way: an ERROR with the remedy, the gauge
	// oxbow.kafka.hanging_transactions, and Stalled, which makes readiness
	// fail. The README's "Hanging transactions" argues the default.
	LeaveHangingTransactions bool

	// OnDeserializationError, OnProcessingError and OnProductionError:
	// default Fail. OnProductionError cannot be DeadLetter.
	OnDeserializationError ErrorPolicy
	OnProcessingError      ErrorPolicy
	OnProductionError      ErrorPolicy
	// DeadLetterTopic receives dead-lettered records; created (one
	// partition) if missing. Required by a DeadLetter policy.
	DeadLetterTopic string
	// DeadLetterLateRecords sends a record that came too late for every
	// window it belongs to (after their grace) to DeadLetterTopic, with
	// oxbow.stage "late", besides counting it as dropped.
	DeadLetterLateRecords bool
}

// AppState is where an application instance is in its life.
type AppState int32

// The states of an instance.
const (
	AppCreated AppState = iota
	AppStarting
	AppRestoring // some assigned task is restoring its state: not ready
	AppRunning
	AppStopping
	AppStopped
	AppFailed
	// AppDegraded: Kafka does not answer (a broker restarting, hung or
	// moving its leaders); the instance retries until Config.TaskTimeout
	// and App.Trouble says why.
	AppDegraded
)

// The states are the runtime's, in its order, so that State converts
// rather than maps (a compile error otherwise, as in stringer's output).
func _() {
	var x [1]struct{}
	_ = x[AppCreated-AppState(runtime.Created)]
	_ = x[AppStarting-AppState(runtime.Starting)]
	_ = x[AppRestoring-AppState(runtime.Restoring)]
	_ = x[AppRunning-AppState(runtime.Running)]
	_ = x[AppStopping-AppState(runtime.Stopping)]
	_ = x[AppStopped-AppState(runtime.Stopped)]
	_ = x[AppFailed-AppState(runtime.Failed)]
	_ = x[AppDegraded-AppState(runtime.Degraded)]
}

// String is the state's name: "created", "running", "degraded", …
func (s AppState) String() string { return runtime.State(s).String() }

// Instance is one instance of an application as its group knows it.
type Instance struct {
	ID   string            // Config.InstanceID
	Addr string            // Config.AdvertisedAddr
	Tags map[string]string // Config.Tags, with Config.Rack as "rack"
}

// App is one instance of an application: it runs its share of a
// topology's tasks on Kafka. Start as many as the input topics have
// partitions; they share the work through their consumer group, and the
// state moves with them through changelog topics.
type App struct {
	rt    *runtime.Runtime
	group string
	cfg   Config
	top   *Topology
	kopts []kgo.Opt // KafkaSecurity's options and KafkaOptions
	// heapShare is the instance's share of the Go heap limit while it runs
	// (MemoryBudget); 0: none.
	heapShare int64
}

var _ Queryable = (*App)(nil)

// NewApp checks the configuration, reporting every problem, and prepares
// an instance. Run starts it.
func NewApp(t *Topology, cfg Config) (*App, error) {
	var errs []error
	if t == nil || t.t == nil {
		errs = append(errs, errors.New("engine: no topology: build one with Builder.Build"))
	}
	if cfg.Guarantee != DefaultGuarantee && cfg.Guarantee != ExactlyOnce && cfg.Guarantee != AtLeastOnce {
		errs = append(errs, fmt.Errorf("engine: unknown Guarantee %d", cfg.Guarantee))
	}
	chosen := cfg.Guarantee
	if t != nil && t.t != nil {
		cfg.Guarantee = t.guarantee(cfg.Guarantee)
	}
	if cfg.AppID != "" {
		if err := topo.CheckName(cfg.AppID); err != nil {
			errs = append(errs, fmt.Errorf("engine: AppID: %w", err))
		}
	}
	if cfg.Version != "" {
		if err := topo.CheckName(cfg.Version); err != nil {
			errs = append(errs, fmt.Errorf("engine: Version: %w", err))
		}
	}
	for name, p := range map[string]ErrorPolicy{"OnDeserializationError": cfg.OnDeserializationError, "OnProcessingError": cfg.OnProcessingError, "OnProductionError": cfg.OnProductionError} {
		if p < Fail || p > DeadLetter {
			errs = append(errs, fmt.Errorf("engine: %s: unknown policy %d", name, p))
		}
	}
	group := NamesOf(cfg).Group()
	if cfg.InstanceID == "" && cfg.StateDir != "" {
		id, err := stateDirInstanceID(cfg.StateDir)
		if err != nil {
			errs = append(errs, err)
		}
		cfg.InstanceID = id
	}
	static := cfg.InstanceID != ""
	if cfg.InstanceID == "" {
		cfg.InstanceID = randomID()
	}
	if cfg.TaskTimeout == 0 {
		cfg.TaskTimeout = 5 * time.Minute
	}
	if cfg.MaxWarmupReplicas == 0 {
		cfg.MaxWarmupReplicas = 2
	}
	if cfg.AcceptableRecoveryLag == 0 {
		cfg.AcceptableRecoveryLag = 10000
	}
	if cfg.StateDir == "" && group != "" {
		cfg.StateDir = NamesOf(cfg).StateDir(cfg.InstanceID)
	}
	if cfg.CommitInterval == 0 {
		cfg.CommitInterval = 30 * time.Second
		if cfg.Guarantee == ExactlyOnce {
			cfg.CommitInterval = 100 * time.Millisecond
		}
	}
	if cfg.TransactionTimeout == 0 {
		cfg.TransactionTimeout = 10 * time.Second
	}
	if cfg.PurgeInterval == 0 {
		cfg.PurgeInterval = 30 * time.Second
	}
	if err := checkBudget(cfg.MemoryBudget); err != nil {
		errs = append(errs, err)
	}
	var shares memoryShares
	if cfg.MemoryBudget > 0 {
		shares = splitBudget(cfg.MemoryBudget)
	}
	if cfg.CacheBytes == 0 {
		cfg.CacheBytes = 10 << 20
		if shares.recordCache > 0 {
			cfg.CacheBytes = shares.recordCache
		}
	}
	if cfg.Workers == 0 {
		cfg.Workers = goruntime.GOMAXPROCS(0)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if chosen == AtLeastOnce && t != nil && len(t.decides) > 0 {
		cfg.Logger.Warn("engine: this topology decides and runs at least once, as its Config says: after a crash it may decide again what it decided since its last commit (events written twice); ExactlyOnce, the default for it, would not",
			"app", cfg.AppID, "decides", strings.Join(t.decides, ", "))
	}
	kopts, err := cfg.KafkaSecurity.Opts()
	if err != nil {
		errs = append(errs, fmt.Errorf("engine: KafkaSecurity: %w", err))
	}
	if shares.fetch > 0 {
		// Before KafkaOptions, which may say otherwise.
		kopts = append(kopts, kgo.FetchMaxBytes(int32(shares.fetch)))
	}
	kopts = append(kopts, cfg.KafkaOptions...)
	var tracer trace.Tracer = tracenoop.NewTracerProvider().Tracer("oxbow")
	if cfg.TracerProvider != nil {
		tracer = cfg.TracerProvider.Tracer("github.com/oxbow-dev/oxbow/engine")
	}
	var meter metric.Meter
	if cfg.MeterProvider != nil {
		// The group names the application's version: two versions in one
		// process (reprocessing side by side) report apart.
		meter = cfg.MeterProvider.Meter("github.com/oxbow-dev/oxbow/engine",
			metric.WithInstrumentationAttributes(attribute.String("oxbow.app", cfg.AppID), attribute.String("oxbow.version", cfg.Version)))
	}
	rcfg := runtime.Config{
		Group:              group,
		Brokers:            cfg.Brokers,
		StateDir:           cfg.StateDir,
		CommitInterval:     cfg.CommitInterval,
		PurgeInterval:      cfg.PurgeInterval,
		CacheBytes:         max(cfg.CacheBytes, 0),
		BlockCacheBytes:    shares.blockCache,
		MemTableBytes:      shares.memTable,
		Workers:            cfg.Workers,
		MaxTaskIdle:        cfg.MaxTaskIdle,
		AdvertisedAddr:     cfg.AdvertisedAddr,
		Rack:               cfg.Rack,
		Tags:               clientTags(cfg),
		InstanceID:         cfg.InstanceID,
		Logger:             cfg.Logger,
		Meter:              meter,
		Tracer:             tracer,
		Tracing:            cfg.TracerProvider != nil,
		KafkaOpts:          kopts,
		SessionTimeout:     cfg.SessionTimeout,
		StaticMember:       static,
		LeaveOnClose:       cfg.LeaveGroupOnClose || cfg.Batch, // a job done leaves
		TaskTimeout:        cfg.TaskTimeout,
		Standbys:           cfg.StandbyReplicas,
		MaxWarmups:         cfg.MaxWarmupReplicas,
		AcceptableLag:      cfg.AcceptableRecoveryLag,
		ExactlyOnce:        cfg.Guarantee == ExactlyOnce,
		TransactionalID:    group + "-" + cfg.InstanceID,
		TransactionTimeout: cfg.TransactionTimeout,
		RepairHanging:      !cfg.LeaveHangingTransactions,
		OnDecodeError:      runtime.ErrorPolicy(cfg.OnDeserializationError),
		OnProcessError:     runtime.ErrorPolicy(cfg.OnProcessingError),
		OnProduceError:     runtime.ErrorPolicy(cfg.OnProductionError),
		DeadLetterTopic:    cfg.DeadLetterTopic,
		DeadLetterLate:     cfg.DeadLetterLateRecords,
	}
	if err := rcfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	rt, err := runtime.New(t.t, rcfg)
	if err != nil {
		return nil, err
	}
	return &App{rt: rt, group: group, cfg: cfg, top: t, kopts: kopts, heapShare: shares.heap}, nil
}

// Run runs the instance until ctx is cancelled or Close is called (then it
// commits, leaves the group or keeps its tasks for a restart as
// LeaveGroupOnClose says, and returns nil), or until it fails. A last
// commit that Kafka refuses (the broker aborted the transaction, the group
// moved on, Kafka is away) is logged, and the tasks' next owner processes
// again what was not committed: Run returns nil, as Kafka Streams' close
// does, unless another instance took this one's InstanceID. With
// Config.Batch it also returns nil once the application has processed its
// inputs up to the ends they had when Run started (see Batch). Kafka going
// away does not end it before TaskTimeout.
func (a *App) Run(ctx context.Context) error {
	defer addHeapShare(a, a.heapShare)()
	if a.cfg.Batch {
		return a.runBatch(ctx)
	}
	return a.rt.Run(ctx)
}

// Close stops the instance and waits until Run has returned.
func (a *App) Close() error { return a.rt.Close() }

// State is the instance's state.
func (a *App) State() AppState { return AppState(a.rt.State()) }

// Trouble is why a Degraded instance is not processing: the last error
// Kafka gave it while it retries. Nil otherwise.
func (a *App) Trouble() error { return a.rt.Trouble() }

// Stalled says why the instance cannot make progress though nothing
// fails: no broker has answered it for 10s while its requests waited
// (Kafka out of its reach: a network cut, one-way loss), or a transaction
// Kafka left open on one of its partitions, found after a partition
// polled nothing for 10s while records waited there, and not repaired
// (LeaveHangingTransactions, or a decision that cannot be known). Nil
// otherwise. Readiness (httpapi's /readyz) fails while it is not nil, and
// a decider's commands answer 503 at once.
func (a *App) Stalled() error { return a.rt.Stalled() }

// Stuck says why the instance has not become ready for long though
// nothing fails: still without tasks from its group, a task restoring
// with nothing restored, or partitions it cannot start on because its
// group's offsets there are unstable (a transaction's offset commit
// waits for its marker), for TransactionTimeout + 15s (25s by default).
// Nil otherwise. Readiness says it as the reason it is not ready.
func (a *App) Stuck() error { return a.rt.Stuck() }

// Hanging lists the transactions left open that Stalled reports.
func (a *App) Hanging() []hanging.Txn { return a.rt.Hanging() }

// Ready is closed the first time the instance runs with all its assigned
// state restored. (Readiness for traffic later is State() == AppRunning.)
func (a *App) Ready() <-chan struct{} { return a.rt.Ready() }

// OnStateChange registers fn to be called at every state change; fn must
// not block.
func (a *App) OnStateChange(fn func(AppState)) {
	a.rt.OnStateChange(func(s runtime.State) { fn(AppState(s)) })
}

// ID is the instance's id (Config.InstanceID).
func (a *App) ID() string { return a.cfg.InstanceID }

// Group is the consumer group and internal-topic prefix:
// AppID, or AppID-Version.
func (a *App) Group() string { return a.group }

// Guarantee is the guarantee the instance runs with: Config.Guarantee,
// or for DefaultGuarantee the topology's default.
func (a *App) Guarantee() Guarantee { return a.cfg.Guarantee }

// AppID is the application's id (Config.AppID).
func (a *App) AppID() string { return a.cfg.AppID }

// Version is the application's version (Config.Version), "" if none.
func (a *App) Version() string { return a.cfg.Version }

// DeadLetterTopic is Config.DeadLetterTopic: where the instance writes the
// records its policies dead-letter (empty: none).
func (a *App) DeadLetterTopic() string { return a.cfg.DeadLetterTopic }

// StateDir is where the instance keeps its local state.
func (a *App) StateDir() string { return a.cfg.StateDir }

// Positions returns, for each input partition this instance processes,
// the offset after the last record its committed state reflects (from the
// instance's first commit of the partition's task on): a record at offset o
// of topic t, partition p — an aggregate's event, say — is reflected in the
// instance's queryable state once Positions()[t][p] > o. Where the last
// record is the last of a transaction whose commit marker ends the
// partition, the position is past the marker, as a Kafka consumer's is: a
// partition read to its end is at its end offset — exactly once; at least
// once, which reads uncommitted records as Kafka Streams does, a record
// may come before its marker, and the position stays one short of the end
// until more records follow.
//
// Positions are the instance's input partitions: a store behind a
// repartition topic reflects a record of them later. StorePosition tells
// what a store reflects.
func (a *App) Positions() map[string]map[int32]int64 { return a.rt.Positions() }

// PositionHeader marks the position markers the engine writes to its
// repartition topics (a record with no key and no value, see
// App.StorePosition); they never reach a processor, and a reader of a
// repartition topic of its own skips them.
const PositionHeader = record.PositionHeader

// StorePosition is what an instance's partitions of a store reflect.
type StorePosition struct {
	// Offsets: per input partition, the offset after the last input
	// record whose every consequence the store's committed state holds,
	// whatever lies between (repartition topics, joins, several
	// sub-topologies): a record at offset o of topic t, partition p is
	// reflected once Offsets[t][p] > o. An input partition the instance's
	// partitions of the store know nothing of yet is missing.
	Offsets map[string]map[int32]int64
	// Inputs are the input topics the store derives from, sorted: a
	// position of any other topic never shows in the store. Derived are
	// those of them it has through a repartition topic: every partition
	// of the store hears of every partition of these (of the others, a
	// partition of the store reflects only its own partition).
	Inputs, Derived []string
	// Partitions are the store's partitions on this instance (from their
	// tasks' first commit here on).
	Partitions []int32
}

// StorePosition returns what this instance's partitions of a store
// reflect (the least of them, where they differ). Each task that writes a
// repartition topic marks, at every commit, every partition of it with the
// input positions of what it wrote; a task that reads the marker knows them
// once it has processed everything before it, so positions follow the data
// through every repartition topic to the stores it feeds. A global table's
// store reflects every partition of its topic, as far as it has read them.
func (a *App) StorePosition(store string) (StorePosition, error) {
	if _, ok := a.top.t.Stores[store]; !ok {
		return StorePosition{}, fmt.Errorf("engine: the topology has no store %q", store)
	}
	sp, ok := a.rt.StorePositions(store)
	if !ok {
		return StorePosition{}, fmt.Errorf("engine: store %s: the instance is not running yet: %w", store, ErrNotReady)
	}
	return StorePosition{Offsets: sp.Offsets, Inputs: sp.Inputs, Derived: sp.Derived, Partitions: sp.Partitions}, nil
}

// Instances are the instances of the application in the group's current
// generation, this one included, with their advertised addresses (none
// before the instance has joined).
func (a *App) Instances() []Instance {
	var out []Instance
	for _, m := range a.rt.Members() {
		out = append(out, instanceOf(m))
	}
	return out
}

// instanceOf is a member of the group as the engine shows it; its tags
// are a copy, the group's own being shared by every assignment.
func instanceOf(m runtime.Instance) Instance {
	return Instance{ID: m.InstanceID, Addr: m.Addr, Tags: maps.Clone(m.Tags)}
}

// MemberInstance is the instance a member of an application's group is,
// from the UserData of its subscription (kmsg.ConsumerMemberMetadata, as
// kadm's DescribeGroups answers it): how another process finds the
// instances of a group it is not in, and their addresses. An error says
// the data is not an engine's.
func MemberInstance(userData []byte) (Instance, error) {
	info, err := assign.DecodeMember(userData)
	if err != nil {
		return Instance{}, fmt.Errorf("engine: not an Oxbow instance's member metadata: %w", err)
	}
	return Instance{ID: info.InstanceID, Addr: info.Addr, Tags: info.Tags}, nil
}

// clientTags are Config.Tags with Config.Rack as "rack".
func clientTags(cfg Config) map[string]string {
	if len(cfg.Tags) == 0 && cfg.Rack == "" {
		return nil
	}
	// A tag without a value (Tags{"zone": os.Getenv("ZONE")} with the
	// variable unset) is no tag.
	tags := map[string]string{}
	for k, v := range cfg.Tags {
		if v != "" {
			tags[k] = v
		}
	}
	if cfg.Rack != "" {
		tags["rack"] = cfg.Rack
	}
	if len(tags) == 0 {
		return nil
	}
	return tags
}

// TaskPlacement is where one task of the group runs, as of the last
// rebalance, and why its standbys are where they are.
type TaskPlacement struct {
	Task     string // "<sub-topology>_<partition>"
	Active   Instance
	Standbys []Instance
	// Why explains the standbys' placement by the instances' tags, one
	// sentence per standby (empty without standbys).
	Why string
}

// Assignment is the placement of every task of the group, as the last
// rebalance decided it (every instance has the same), in task order. It
// is empty before the instance's first assignment.
func (a *App) Assignment() []TaskPlacement {
	var out []TaskPlacement
	for _, p := range a.rt.Placements() {
		tp := TaskPlacement{Task: p.Task.String(), Active: instanceOf(p.Active), Why: p.Why}
		for _, s := range p.Standbys {
			tp.Standbys = append(tp.Standbys, instanceOf(s))
		}
		out = append(out, tp)
	}
	return out
}

// ChangelogTopic returns the changelog topic of a store of the topology
// (for a global table's store, the topic it reads): every change of the
// store, keyed and encoded as in the store, which a change feed can follow.
func (a *App) ChangelogTopic(store string) (string, error) {
	spec, ok := a.top.t.Stores[store]
	switch {
	case !ok:
		return "", fmt.Errorf("engine: no store %q", store)
	case spec.Global:
		return spec.Topic, nil
	case !spec.Logged:
		return "", fmt.Errorf("engine: store %q has no changelog (WithoutChangelog)", store)
	}
	return NamesOf(a.cfg).ChangelogTopic(store), nil
}

// RestoredRecords counts the changelog records this instance has restored
// into local state since it started.
func (a *App) RestoredRecords() int64 { return a.rt.Restored() }

// StandbyLag is, for each standby task of the instance ("<sub>_<partition>"),
// how many changelog records its state is behind the active task's.
func (a *App) StandbyLag() map[string]int64 { return a.rt.StandbyLag() }

// StandbyRecords is the number of changelog records the instance's standby
// tasks applied since it started.
func (a *App) StandbyRecords() int64 { return a.rt.StandbyRecords() }

// Skipped counts the records the instance's current tasks dropped, by reason.
func (a *App) Skipped() map[string]int64 { return a.rt.Skipped() }

// RestoreProgress is how far the restoration of one store of a task has
// come on this instance.
type RestoreProgress struct {
	Task      string    `json:"task"`
	Store     string    `json:"store"`
	Restored  int64     `json:"restored"`  // changelog records applied so far
	Remaining int64     `json:"remaining"` // records up to where the changelog ended when the restore began
	Started   time.Time `json:"started"`
}

// Restoring lists the stores of this instance's active tasks that are
// being restored, by task and store (empty once every one is restored):
// the figures a progress bar and an estimate of the time left need. It
// reads what the instance published at the end of its restorer's last
// step.
func (a *App) Restoring() []RestoreProgress {
	var out []RestoreProgress
	for _, p := range a.rt.Restoring() {
		out = append(out, RestoreProgress(p))
	}
	return out
}

// NodeRecords counts, per node of the topology, the records that have
// reached the node on this instance since it started: read by a source, or
// passed to a processor or sink by its parents. Counts go on across
// rebalances (a record processed again after a crash or an aborted
// transaction counts again), so the difference of two readings over the
// time between them is the node's rate. It reads what the instance
// published at the end of its last round (what a commit's flush of the
// record cache forwards shows at the end of the next).
func (a *App) NodeRecords() map[string]int64 { return a.rt.NodeRecords() }

// Tasks lists the tasks the group assigned to this instance, as
// "<sub-topology>_<partition>" (see Topology.Describe for the numbers).
func (a *App) Tasks() []string { return a.rt.ActiveTasks() }

// SetWorkers changes the number of goroutines processing the instance's
// tasks while it runs, from its next round (a few milliseconds): tasks are
// shared among the workers afresh every round, so nothing is rebalanced,
// lost or repeated. n must be at least 1; more workers than the instance
// has tasks with work leaves the rest idle.
func (a *App) SetWorkers(n int) error { return a.rt.SetWorkers(n) }

// Workers is the number of worker goroutines: Config.Workers, or as
// SetWorkers last set it.
func (a *App) Workers() int { return a.rt.Workers() }

// PanicError is a panic in user code recovered by the engine: while a
// record was processed it goes through OnProcessingError like any error
// the record caused (the worker carries on with the next record); elsewhere
// (a commit's cache flush, a processor's Init, the callback of
// ForwardToProduced, a global table's serdes) it stops the instance with
// Run returning it, rather than ending the process, and nothing of the
// commit interval is committed. A panic in a processor's Close (which runs
// after its task's last commit) also makes Run return it; the other
// processors and the stores of the task are closed all the same.
type PanicError = record.PanicError

// instanceIDFile is the file in the state directory that keeps the
// instance's id across restarts.
const instanceIDFile = "oxbow-instance-id"

// stateDirInstanceID reads the instance id kept in dir, or creates one.
func stateDirInstanceID(dir string) (string, error) {
	path := filepath.Join(dir, instanceIDFile)
	b, err := os.ReadFile(path)
	if err == nil {
		id := strings.TrimSpace(string(b))
		if id == "" {
			return "", fmt.Errorf("engine: %s is empty; delete it or set InstanceID", path)
		}
		return id, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("engine: read the instance id: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("engine: state dir: %w", err)
	}
	id := randomID()
	// Write then rename, so that a crash never leaves a partial id.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("engine: write the instance id: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("engine: write the instance id: %w", err)
	}
	return id, nil
}

func randomID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
