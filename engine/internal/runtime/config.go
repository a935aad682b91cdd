// Package runtime runs a topology on Kafka as one instance of a distributed
// application: it joins the application's consumer group, turns its assigned
// partitions into tasks, restores their state from changelogs, processes
// records and commits. Package engine's App is its public face.
//
// # The loop
//
// One goroutine (Run's) owns the consumer. Each round it polls a batch of
// records, hands them to their tasks' partition queues, lets the workers
// process every task that has work (a task is processed by one worker at a
// time), runs wall-clock punctuators, and commits when the commit interval
// has passed. The client is created with BlockRebalanceOnPoll: a rebalance
// can only happen between rounds, when no record is being processed, so the
// revoke callback can flush, commit and close tasks without racing the
// workers. A task whose queues are full has its partitions paused, so
// fetching never outruns processing (pull-based backpressure).
//
// The workers are goroutines of the round: its tasks with work are shared
// among them, and the round ends when all are done. So the number of
// workers can change between two rounds (SetWorkers) without moving a
// partition or a record. A panic in user code is recovered where it
// happens: while a record is processed it is that record's processing
// error (a *PanicError) and the worker goes on to the next record; a panic
// anywhere else in a worker's task becomes the round's error, and one in a
// processor's Init or Close, a ForwardToProduced callback (on the Kafka
// client's goroutine) or a global table fails the instance (see guard on
// where each is recovered).
//
// # Commit
//
// A commit flushes every task's record cache, waits until Kafka has
// acknowledged every produced record (outputs and changelogs), commits the
// consumed offsets, and only then applies each task's pending state to
// pebble together with the changelog offsets it corresponds to. A crash at
// any point leaves local state equal to a known changelog position, so
// restoring replays only the changelog's tail.
//
// # Exactly-once
//
// With ExactlyOnce the records, changelogs and input offsets of a commit
// interval form one Kafka transaction; see eos.go for how it differs from
// the at-least-once commit (the rebalance callbacks, the offsets of records
// polled but not processed).
//
// # Membership and rebalancing
//
// An instance with a stable id joins as a static member (KIP-345): its
// restart within the session timeout takes its tasks back with no
// rebalance (measured: a SIGKILLed instance commits new input 0.15-0.19s
// after its restart; a rolling restart of three moves nothing). The group
// protocol is the classic one with Oxbow's own balancer, cooperative
// (package assign: a rebalance revokes only the tasks that move, and a move
// takes two rebalances, so a task is never open on two members). Why not
// KIP-848's consumer protocol: its assignors run on the broker and know
// nothing of tasks, state or standbys; KIP-1071's streams protocol, which
// does, franz-go does not speak.
//
// What cooperative buys differs by guarantee. At least once, the tasks that
// stay are committed and go on; only the moved ones close. Exactly once,
// franz-go's transactional session aborts the open transaction across any
// revocation (it cannot commit from the revoke callback) and a commit that
// races the second rebalance, so a member that gives up a task closes its
// others dirty and reopens them (restoring the records their changelogs hold
// beyond their checkpoints) and redoes their last interval; a member that
// only gains tasks goes on untouched. Measured on the scale test
// (TestAvailabilityScaleOutIn, 2 → 3 → 2 instances, exactly once): the
// longest pause of a staying task's output was 0.53-0.69s scaling out
// (eager: 0.21s, one rebalance instead of two) and 0.11-0.37s scaling in
// (eager: 0.21s). Committing before revoking, as Kafka Streams does, needs
// transactions managed without the session: not done yet.
//
// A task does not move to an instance whose state of it is far behind
// (MaxWarmups, AcceptableLag; assign.AssignWarm): the new owner restores a
// warm-up replica, as a standby, while the old owner goes on processing,
// and when a standby that started behind has caught up, the restorer asks
// the group for a rebalance (probeIfCaughtUp), in which the task moves and
// is restored from the warm copy, the last few records only.
//
// # Riding out Kafka's absence
//
// A round that fails for want of Kafka does not end the instance: see
// trouble.go (TaskTimeout, the Degraded state, reconnecting with a new
// group client).
package runtime

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/oxbow-dev/oxbow/engine/record"
)

// ErrorPolicy says what happens to a record that fails.
type ErrorPolicy int

// The policies.
const (
	// Fail stops the instance with the error; nothing after the last commit
	// is committed, so the record is processed again after a restart.
	Fail ErrorPolicy = iota
	// Skip logs the error, counts the record as dropped and goes on.
	Skip
	// DeadLetter writes the record, as it was read, to the dead-letter topic
	// with the error and its origin in headers, counts it, and goes on.
	DeadLetter
)

func (p ErrorPolicy) String() string {
	switch p {
	case Skip:
		return "skip"
	case DeadLetter:
		return "dead-letter"
	}
	return "fail"
}

// Headers of a dead-lettered record (public: a reader of the dead-letter
// topic needs them).
const (
	HeaderError     = record.HeaderError
	HeaderTopic     = record.HeaderTopic
	HeaderPartition = record.HeaderPartition
	HeaderOffset    = record.HeaderOffset
	HeaderStage     = record.HeaderStage // "decode", "process", "produce" or "late"
)

// Config is a validated instance configuration (package engine fills in the
// defaults and validates).
type Config struct {
	Group          string // the consumer group, "<AppID>[-<Version>]"; prefixes internal topics
	Brokers        []string
	StateDir       string
	CommitInterval time.Duration
	PurgeInterval  time.Duration // how often committed repartition records are deleted
	CacheBytes     int64         // per instance; split evenly among its tasks
	Workers        int
	MaxTaskIdle    time.Duration
	AdvertisedAddr string
	InstanceID     string
	Rack           string            // the Kafka clients' rack (kgo.Rack)
	Tags           map[string]string // client tags, for rack-aware standbys
	Logger         *slog.Logger
	Meter          metric.Meter
	Tracer         trace.Tracer
	Tracing        bool // a tracer provider was configured: trace every record
	KafkaOpts      []kgo.Opt
	SessionTimeout time.Duration
	// StaticMember: the instance joins its group with InstanceID as its
	// group.instance.id (KIP-345); LeaveOnClose says whether a clean stop
	// leaves the group anyway (a dynamic member always does).
	StaticMember bool
	LeaveOnClose bool
	// TaskTimeout: how long the instance retries against a Kafka that does
	// not answer before it fails (Kafka Streams' task.timeout.ms).
	TaskTimeout time.Duration
	// ExactlyOnce: outputs, changelogs and input offsets commit in one
	// Kafka transaction, with this transactional id (stable across restarts
	// of the instance, so that a restart fences its predecessor at once).
	// Standbys is the number of standby replicas of each task.
	Standbys int
	// MaxWarmups and AcceptableLag: warm-up replicas (assign.Warmups).
	MaxWarmups      int
	AcceptableLag   int64
	ExactlyOnce     bool
	TransactionalID string
	// TransactionTimeout: how long the broker lets a transaction of a
	// crashed instance stay open before it aborts it.
	TransactionTimeout time.Duration
	// RepairHanging: the stall watcher ends the transactions Kafka left
	// open that it finds, with the marker their coordinator decided
	// (stall.go); otherwise it only reports them.
	RepairHanging bool

	OnDecodeError   ErrorPolicy
	OnProcessError  ErrorPolicy
	OnProduceError  ErrorPolicy
	DeadLetterTopic string
	// DeadLetterLate: records too late for every window they belong to go
	// to the dead-letter topic (stage "late") besides being counted.
	DeadLetterLate bool

	// BlockCacheBytes and MemTableBytes size the state's pebble block
	// cache and memtables (0: state.Options' defaults).
	BlockCacheBytes int64
	MemTableBytes   int64

	// MaxBufferedRecords bounds the records waiting in one task's queues
	// before its partitions are paused.
	MaxBufferedRecords int
	// Now is the wall clock (tests replace it).
	Now func() time.Time
}

// Validate reports every problem of the configuration, joined.
func (c *Config) Validate() error {
	var errs []error
	if c.Group == "" {
		errs = append(errs, errors.New("engine: the group is empty"))
	}
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("engine: Brokers is empty"))
	}
	if c.StateDir == "" {
		errs = append(errs, errors.New("engine: StateDir is empty"))
	}
	if c.Workers <= 0 {
		errs = append(errs, fmt.Errorf("engine: Workers is %d; it must be positive", c.Workers))
	}
	if c.PurgeInterval <= 0 {
		errs = append(errs, fmt.Errorf("engine: PurgeInterval is %v; it must be positive", c.PurgeInterval))
	}
	if c.CommitInterval <= 0 {
		errs = append(errs, fmt.Errorf("engine: CommitInterval is %v; it must be positive", c.CommitInterval))
	}
	for _, p := range []ErrorPolicy{c.OnDecodeError, c.OnProcessError, c.OnProduceError} {
		if p == DeadLetter && c.DeadLetterTopic == "" {
			errs = append(errs, errors.New("engine: an error policy is DeadLetter but DeadLetterTopic is empty"))
			break
		}
	}
	if c.TaskTimeout <= 0 {
		errs = append(errs, fmt.Errorf("engine: TaskTimeout is %v; it must be positive", c.TaskTimeout))
	}
	if c.Standbys < 0 {
		errs = append(errs, fmt.Errorf("engine: StandbyReplicas is %d; it cannot be negative", c.Standbys))
	}
	if c.ExactlyOnce && c.TransactionalID == "" {
		errs = append(errs, errors.New("engine: exactly-once needs a transactional id"))
	}
	if c.ExactlyOnce && c.CommitInterval >= c.TransactionTimeout {
		errs = append(errs, fmt.Errorf("engine: CommitInterval %v is not below TransactionTimeout %v: the broker would abort every transaction before it commits", c.CommitInterval, c.TransactionTimeout))
	}
	if c.ExactlyOnce && c.OnProduceError == Skip {
		errs = append(errs, fmt.Errorf("engine: OnProductionError is %v, but with ExactlyOnce a record that cannot be produced aborts its whole transaction: it cannot be skipped; use Fail", c.OnProduceError))
	}
	if c.DeadLetterLate && c.DeadLetterTopic == "" {
		errs = append(errs, errors.New("engine: DeadLetterLateRecords needs a DeadLetterTopic"))
	}
	if c.OnProduceError == DeadLetter {
		errs = append(errs, errors.New("engine: OnProductionError cannot be DeadLetter (the dead-letter topic is produced to as well); use Fail or Skip"))
	}
	return errors.Join(errs...)
}
