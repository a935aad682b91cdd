// Package topo is the untyped core of the engine: the processor graph that the
// typed DSL records, its validation into sub-topologies, and the task that runs
// one sub-topology for one partition.
//
// Values travel through a task as Go values (any); a nil Value is a
// tombstone. Between table processors the value is a [Change] carrying the old
// and the new value of the key, so that downstream steps (filters, re-grouping
// with a subtractor) can undo what the old value contributed. Bytes appear only
// at source and sink nodes and in stores, through [Codec]s.
package topo

import (
	"time"

	"github.com/oxbow-dev/oxbow/engine/record"
)

// Header is one Kafka record header (public: users read a record's headers).
type Header = record.Header

// Record is what flows between processors.
type Record struct {
	Key       any
	Value     any // nil: tombstone; a Change between table processors
	Timestamp time.Time
	Headers   []Header

	// Where the key came from, so that a sink can write the bytes it was
	// read as instead of encoding it again, when it is still that key (see
	// nodeInst.sink).
	src    *nodeInst
	srcKey any
	rawKey []byte

	// produced, if set, is called once Kafka has acknowledged the record a
	// sink wrote for this one (see WithProduced).
	produced func(partition int32, offset int64)
	// raw, if set, has the bytes a table store wrote for the record's key
	// and new value: a sink whose codecs are the same writes them rather
	// than encoding again, if the key and value are still those (see
	// TableStore.SetCodecs).
	raw *rawBytes
}

// rawBytes are a key and a value with their encodings.
type rawBytes struct {
	key, value     []byte
	keyOf, valueOf any
	kc, vc         Codec
}

// sameCodec: a encodes every value as b does, and decoding gives it back.
func sameCodec(a, b Codec) bool {
	sc, ok := a.(SameCodec)
	return ok && b != nil && sc.SameAs(b)
}

// WithProduced returns r with fn to be called, from any goroutine, with the
// partition and offset of the record a sink writes for it, once Kafka has
// acknowledged it (before the commit that includes it). A processor that
// makes a new record rather than forwarding this one loses it.
func WithProduced(r Record, fn func(partition int32, offset int64)) Record {
	r.produced = fn
	return r
}

// SameCodec is implemented by codecs that can tell that another codec
// encodes every value exactly as they do and that decoding then encoding a
// value gives back its bytes: then a key read by one can be written by the
// other without encoding it again.
type SameCodec interface {
	SameAs(other Codec) bool
}

// InfallibleDecoder is implemented by codecs that can tell that Decode
// accepts any bytes.
type InfallibleDecoder interface {
	DecodeNeverFails() bool
}

// Unread is the value of a record whose value no node reads (see
// Node.ValueUnread).
var Unread any = unread{}

type unread struct{}

func (unread) String() string { return "<value not decoded>" }

// FreshEncoder is implemented by codecs that can tell that Encode returns
// bytes nobody else holds, which a cache may then keep without a copy.
type FreshEncoder interface {
	EncodesFresh() bool
}

// Change is the value of a record that flows between table processors: the
// key's value before and after the update. Nil means absent.
type Change struct {
	Old, New any
}

// Origin is where the record being processed came from.
type Origin struct {
	Topic     string
	Partition int32
	Offset    int64
}

// Codec converts between Go values and bytes. Typed serdes are adapted to it
// by the engine.
type Codec interface {
	Encode(v any) ([]byte, error)
	Decode(b []byte) (any, error)
}

// Processor is an untyped processor node instance; one exists per task.
type Processor interface {
	Init(ctx *Context) error
	Process(r Record) error
	Close() error
}

// NodeKind says what a node is.
type NodeKind int

// The kinds of node.
const (
	SourceNode NodeKind = iota
	ProcessorNode
	SinkNode
)

func (k NodeKind) String() string {
	switch k {
	case SourceNode:
		return "Source"
	case SinkNode:
		return "Sink"
	default:
		return "Processor"
	}
}

// Node is one vertex of the graph.
type Node struct {
	Name     string
	Kind     NodeKind
	Op       string // what the DSL called it: "filter", "count", …
	Parents  []*Node
	Children []*Node

	// Source and sink nodes.
	Topic        string // base name when Internal
	Internal     bool   // an internal topic: its name is prefixed at run time
	KeyCodec     Codec
	ValueCodec   Codec
	ChangeValues bool // the topic carries encoded Changes (table re-grouping)
	// Timestamps (sources) gives a record's event time from its decoded key
	// and value and the time Kafka recorded (Unix ms); nil keeps the
	// recorded time. A tombstone keeps the recorded time.
	Timestamps func(key, value any, recorded int64) (int64, error)
	// WallClockTimestamps (sources): a record's event time is the wall
	// clock's when it is processed.
	WallClockTimestamps bool
	// GlobalStores (processors) are global stores the node reads (a join
	// with a global table): every task opens them read-only.
	GlobalStores []string
	// ValueBlind (processors): the node reads only whether a record has a
	// value, never the value (a count).
	ValueBlind bool
	// ValueUnread (sources): every child is ValueBlind and the value codec
	// cannot fail to decode, so the source gives records the placeholder
	// Unread as their value instead of decoding it: nothing changes but
	// the work not done.
	ValueUnread bool
	// KeyComparable: the node's key type is comparable and not an
	// interface, so a key can be checked for being unchanged since its
	// source (see RawKey).
	KeyComparable bool
	// ValueComparable: the node's value type is comparable and not an
	// interface (a sink may then compare values with ==).
	ValueComparable bool
	InternalTopic   *InternalTopic
	// Partitioner (sinks), if set, chooses the partitions of each record
	// from its key and value (nil for a null key or a tombstone) and the
	// topic's partition count n: one or several (a copy to each), or none
	// (by the key, as without it). See Output.Partitions.
	Partitioner func(key, value any, n int) []int
	// DropNullKeys (sinks) drops and counts the records with a null key,
	// as Kafka Streams filters them out of every repartition topic.
	DropNullKeys bool
	// Feedback (sinks) marks a deliberate loop: the topic leads back to
	// the sink through a source of the topology, and something on the way
	// (a process manager's state, say) ends each round. Build's check for
	// cycles does not follow it.
	Feedback bool

	// Processor nodes.
	New    func() Processor
	Stores []string

	// Global: the node belongs to a global store's sub-topology.
	Global bool

	// Typed is the DSL's typed form of the node, from which it compiles
	// Fuse; opaque here.
	Typed any
	// Fuse (sources) compiles the source's fused line for a task (see
	// Fused); nil if the source has none.
	Fuse func(env FuseEnv) Fused

	// Err is a wiring problem found while the DSL recorded the node; Build
	// reports it with the node's name.
	Err error
}

// StoreKind is the shape of a store.
type StoreKind int

// The kinds of store.
const (
	KeyValueStore StoreKind = iota
	// WindowStore keys are a record key followed by a window start (8
	// bytes); the record key alone says which partition holds them.
	WindowStore
	// SessionStore keys are a record key followed by a session's end and
	// start (8 bytes each).
	SessionStore
)

func (k StoreKind) String() string {
	switch k {
	case WindowStore:
		return "window"
	case SessionStore:
		return "session"
	}
	return "key-value"
}

// PartitionKey is the part of a store key that the partitioner hashed: the
// whole key, or a window or session store's record key.
func (k StoreKind) PartitionKey(key []byte) []byte {
	switch {
	case k == WindowStore && len(key) >= 8:
		return key[:len(key)-8]
	case k == SessionStore && len(key) >= 16:
		return key[:len(key)-16]
	}
	return key
}

// StoreSpec declares a state store.
type StoreSpec struct {
	Name     string
	Kind     StoreKind
	Logged   bool // writes a changelog topic
	InMemory bool
	Global   bool // holds every partition of a global table's topic
	// Topic is the store's changelog topic base name, or, for a global store,
	// its source topic.
	Topic string
	// Segment, for a window or session store (Kind) of a windowed
	// aggregation, is the length of the time segments its keys are filed
	// under locally, by their window's start or session's end (see the
	// state package's Layout); 0: none.
	Segment time.Duration
}

// ChangelogTopic is the base name of a store's changelog topic.
func ChangelogTopic(store string) string { return store + "-changelog" }

// InternalTopicKind says what an internal topic is for.
type InternalTopicKind int

// The kinds of internal topic.
const (
	RepartitionTopic InternalTopicKind = iota
	ChangelogTopicKind
)

func (k InternalTopicKind) String() string {
	if k == ChangelogTopicKind {
		return "changelog"
	}
	return "repartition"
}

// InternalTopic is a topic the application creates and owns.
type InternalTopic struct {
	Name       string // base name; the runtime prefixes it with the application id
	Kind       InternalTopicKind
	Partitions int // 0: as many as the sub-topology's other inputs
	// LikeReader: the topic has as many partitions as the sub-topology
	// reading it has tasks from its other inputs (a foreign-key join's
	// subscription and response topics, co-partitioned with the table
	// on the other side), rather than as the one writing it.
	LikeReader bool
}

// Graph is what the DSL records: nodes in creation order and stores.
type Graph struct {
	Nodes  []*Node
	Stores []*StoreSpec
	Errs   []error
}

// AddNode appends a node, linking it to its parents.
func (g *Graph) AddNode(n *Node) *Node {
	for _, p := range n.Parents {
		p.Children = append(p.Children, n)
	}
	g.Nodes = append(g.Nodes, n)
	return n
}

// AddStore records a store, once per name.
func (g *Graph) AddStore(s *StoreSpec) {
	for _, o := range g.Stores {
		if o == s {
			return
		}
	}
	g.Stores = append(g.Stores, s)
}

// Store finds a store by name.
func (g *Graph) Store(name string) *StoreSpec {
	for _, s := range g.Stores {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// Unwrap is set by package engine: it returns the graph inside an
// *engine.Topology, so that sibling packages (the test driver, the runtime)
// can run a topology without the engine exporting its internals.
var Unwrap func(any) *Topology
