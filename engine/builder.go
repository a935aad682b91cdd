package engine

import (
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
	"github.com/oxbow-dev/oxbow/engine/record"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// Builder records a topology. Declare sources with [NewStream], [NewTable]
// and [NewGlobalTable], chain operations on what they return, then call
// [Builder.Build]. A Builder is not safe for concurrent use, and it cannot be
// changed once built: every later call panics, since that is a wiring mistake.
type Builder struct {
	g        topo.Graph
	siblings map[string]int
	built    bool
	// omitAbsent: OmitAbsentDeletes was given.
	omitAbsent bool
	err        error // a problem with the builder's options, reported by Build
	// storeInfo says what the stores of windowed aggregations and
	// versioned tables hold; the others hold keys and values.
	storeInfo map[string]StoreInfo
	decides   []string // see DecidesExactlyOnce
}

// NewBuilder returns an empty builder. Options: [OmitAbsentDeletes].
func NewBuilder(opts ...Option) *Builder {
	b := &Builder{siblings: map[string]int{}, storeInfo: map[string]StoreInfo{}}
	o, err := b.opts("NewBuilder", opts, "OmitAbsentDeletes")
	if err == nil && o.name != "" {
		err = errors.New("NewBuilder does not use the option Named")
	}
	b.omitAbsent, b.err = o.omitAbsent, err
	return b
}

// Topology is a validated, immutable processor graph, ready to be run by the
// test driver or by an application instance.
type Topology struct {
	t       *topo.Topology
	stores  map[string]StoreInfo // see Builder.storeInfo
	decides []string             // see Builder.DecidesExactlyOnce
}

// DecidesExactlyOnce marks what is being built as deciding: what, named
// by what, writes a decision (an aggregate's events for a command, a
// process manager's next commands) that at least once could write twice
// after a crash. An application of a topology so marked runs ExactlyOnce
// unless its Config names a Guarantee, and warns when that is AtLeastOnce.
func (b *Builder) DecidesExactlyOnce(what string) {
	b.mustOpen()
	b.decides = append(b.decides, what)
}

// Decides lists what the topology decides (Builder.DecidesExactlyOnce),
// sorted; none for a topology of views.
func (t *Topology) Decides() []string {
	return slices.Sorted(slices.Values(t.decides))
}

// guarantee is the guarantee an application of t runs with when its
// Config says g.
func (t *Topology) guarantee(g Guarantee) Guarantee {
	switch {
	case g != DefaultGuarantee:
		return g
	case len(t.decides) > 0:
		return ExactlyOnce
	default:
		return AtLeastOnce
	}
}

func init() {
	topo.Unwrap = func(x any) *topo.Topology {
		if t, ok := x.(*Topology); ok && t != nil {
			return t.t
		}
		return nil
	}
}

// Build validates the recorded graph and freezes the builder. Every problem
// is reported, joined, each naming the node or store it is about.
func (b *Builder) Build() (*Topology, error) {
	b.mustOpen()
	b.built = true
	if b.err != nil {
		return nil, fmt.Errorf("engine: %w", b.err)
	}
	t, err := topo.Build(&b.g)
	if err != nil {
		return nil, err
	}
	fuse(&b.g)
	markUnreadValues(&b.g)
	return &Topology{t: t, stores: b.storeInfo, decides: slices.Clone(b.decides)}, nil
}

// Describe lists the sub-topologies with their sources, processors and sinks,
// then the stores and the internal topics, in the format of Kafka Streams'
// TopologyDescription. Internal topics are shown with the ${app} prefix the
// runtime gives them.
func (t *Topology) Describe() string { return t.t.Describe() }

// SourceTopics lists the topics the topology reads as streams and tables
// (not its internal topics, nor the topics of global tables, which every
// instance reads whole), sorted: the topics whose consumption by the
// application's group its lag measures.
func (t *Topology) SourceTopics() []string {
	var out []string
	for _, sub := range t.t.Subs {
		if sub.Global {
			continue
		}
		for _, ref := range sub.SourceTopics() {
			if !ref.Internal {
				out = append(out, ref.Name)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Stores lists the names of the topology's stores.
func (t *Topology) Stores() []string {
	return slices.Sorted(maps.Keys(t.t.Stores))
}

func (b *Builder) mustOpen() {
	if b.built {
		panic("engine: the builder was already built; topologies are immutable once built")
	}
}

// Option tunes one operation of the DSL. Options an operation has no use
// for are reported by Build.
type Option func(*options)

type options struct {
	name       string
	store      string
	inMemory   bool
	noLog      bool
	feedback   bool
	partitions int
	stores     []StoreDef
	valueSerde any
	timestamps any // WithTimestamps: a func(K, V, time.Time) (time.Time, error)
	emitFinal  bool
	retention  time.Duration
	wallClock  bool
	// SuppressUntil's bounds.
	maxRecords       int
	maxBytes         int64
	shutDownWhenFull bool
	resultHeaders    func([]Header) []Header
	versioned        time.Duration // Versioned: the history kept
	joinGrace        time.Duration
	emitInterval     *time.Duration // EmitInterval
	omitAbsent       bool           // OmitAbsentDeletes
	set              []string       // which options were given, for the "not used here" check
}

// WithTimestamps gives the records a source reads their event time (the
// time windows, stream time and joins go by): fn gets each record's key and
// value and the time Kafka recorded for it, and returns the event time, say
// a field of the value. A record for which fn returns an error, or whose
// event time is negative (before 1970), follows the
// OnDeserializationError policy, as a [*TimestampError]. Tombstones keep
// their recorded time. Without this option a record's event time is the
// one Kafka recorded. For NewStream, NewTable and NewGlobalTable; K and V
// must be the source's types.
func WithTimestamps[K, V any](fn func(key K, value V, recorded time.Time) (time.Time, error)) Option {
	return func(o *options) {
		o.timestamps = fn
		o.set = append(o.set, "WithTimestamps")
	}
}

// WithWallClockTimestamps gives the records a source reads the wall-clock
// time at which they are processed as their event time (processing-time
// semantics). For NewStream, NewTable and NewGlobalTable.
func WithWallClockTimestamps() Option {
	return func(o *options) { o.wallClock = true; o.set = append(o.set, "WithWallClockTimestamps") }
}

// TimestampError is a record whose event time is invalid: negative, or
// refused by the source's WithTimestamps function.
type TimestampError = record.TimestampError

// sourceTimes sets a source node's event-time options.
func sourceTimes[K, V any](n *topo.Node, o *options) error {
	if o.wallClock && o.timestamps != nil {
		return errors.New("WithTimestamps and WithWallClockTimestamps both given: choose one")
	}
	n.WallClockTimestamps = o.wallClock
	if o.timestamps == nil {
		return nil
	}
	fn, ok := o.timestamps.(func(K, V, time.Time) (time.Time, error))
	if !ok {
		return fmt.Errorf("WithTimestamps is given a %T, but the source's records are %v, %v", o.timestamps, reflect.TypeFor[K](), reflect.TypeFor[V]())
	}
	if fn == nil {
		return errNilFunc("timestamp")
	}
	n.Timestamps = func(k, v any, recorded int64) (int64, error) {
		t, err := fn(as[K](k), as[V](v), topo.TimeOf(recorded))
		if err != nil {
			return 0, err
		}
		if t.IsZero() {
			return 0, errors.New("the timestamp function returned the zero time")
		}
		return t.UnixMilli(), nil
	}
	return nil
}

// Named names the operation's node. Without it a name is derived from the
// operation and its parents, stable while those stay the same; name the nodes
// whose state or internal topics must survive a change of the topology. The
// name also names the operation's store and internal topics unless
// [Materialized] says otherwise.
func Named(name string) Option {
	return func(o *options) { o.name = name; o.set = append(o.set, "Named") }
}

// ResultHeaders chooses the headers of the results of a join: fn gets the
// headers of the record that made the result (the stream record, the table
// update, or for a foreign-key join the left row's or the right row's
// update; for a stream join's result emitted when a window closes, the
// record whose arrival emitted it, since the join keeps values only) and
// returns what the result carries.
// Without it a result carries that record's headers.
func ResultHeaders(fn func(headers []Header) []Header) Option {
	return func(o *options) { o.resultHeaders = fn; o.set = append(o.set, "ResultHeaders") }
}

// forwardWith returns the forward of a join's results with the headers
// fn chooses (c.Forward itself when fn is nil).
func forwardWith(fn func([]Header) []Header) func(c *topo.Context, r topo.Record) error {
	if fn == nil {
		return (*topo.Context).Forward
	}
	return func(c *topo.Context, r topo.Record) error {
		r.Headers = fn(r.Headers)
		return c.Forward(r)
	}
}

// Materialized names the store an operation writes (an aggregation, a table)
// and makes it queryable under that name. Table operations that keep no store
// by default (Filter, MapTableValues) get one.
func Materialized(store string) Option {
	return func(o *options) { o.store = store; o.set = append(o.set, "Materialized") }
}

// InMemory keeps the operation's store in memory rather than in the local
// database. It is still rebuilt from its changelog after a restart.
func InMemory() Option {
	return func(o *options) { o.inMemory = true; o.set = append(o.set, "InMemory") }
}

// EmitFinal makes a windowed aggregation emit each window once, after it
// closes, with its final value, instead of every update: Kafka Streams'
// emit strategy on window close. A window closes when the aggregation's own
// stream time (the largest timestamp of the records it took) passes its end
// plus the grace period (sessions: their end plus gap plus grace). As in
// Kafka Streams, the aggregation looks for closed windows only when it
// takes a record, and then at most once per second of wall-clock time (the
// first record always looks; [EmitInterval] changes the second); it
// emits every window that closed since it last emitted, earliest first,
// each stamped with its latest record's time. Without the record cache, a
// time or sliding window that started more than its store's retention (see
// [Retention]) before the latest window written is not emitted: Kafka
// Streams' store no longer shows it. For each window as soon as stream
// time closes it, suppress the updates instead
// ([SuppressUntilWindowCloses]). Windows waiting to close are kept in a
// second store, "<store>-emit", with a changelog: after a restart none is
// lost, and with exactly-once none is emitted twice.
func EmitFinal() Option {
	return func(o *options) { o.emitFinal = true; o.set = append(o.set, "EmitFinal") }
}

// EmitInterval sets how often, at most, by the wall clock, an operation
// whose results wait for time to pass looks for them, on a record it takes:
// an [EmitFinal] windowed aggregation for the windows that closed (Kafka
// Streams' __emit.interval.ms.kstreams.windowed.aggregation__), a left or
// outer stream–stream join for the records whose windows closed without a
// partner (__emit.interval.ms.kstreams.outer.join.spurious.results.fix__).
// The default is Kafka Streams': a second in an [App], and 0, every
// record, in the enginetest driver, as in Kafka Streams' TopologyTestDriver.
// The first look after a task starts is never held back.
func EmitInterval(d time.Duration) Option {
	return func(o *options) { o.emitInterval = &d; o.set = append(o.set, "EmitInterval") }
}

// defaultEmitInterval is Kafka Streams' default of both its emit intervals.
const defaultEmitInterval = time.Second

// Retention keeps a windowed aggregation's windows in its store for d
// (default: a day; at least what the windows need: the size plus grace,
// twice the time difference plus grace for sliding windows, the gap plus
// grace for sessions), as Kafka Streams' segmented store does: the windows
// are filed by start (sessions: by end) in segments of d/2, at least a
// minute, and a segment is deleted, from the store and its changelog,
// without a change downstream (an update still waiting in the record cache
// is emitted first), once the latest window written started (ended) d
// after the segment's end. d is also the retention Kafka Streams' store
// reads with, which hides a window that started (a session that ended)
// more than d before the latest one written; there, the default is the
// least the windows need, not a day. As in Kafka Streams, without the
// record cache a record does not see the sliding windows and sessions so
// hidden, a cogroup's lagging stream starts such a time window afresh, and
// [EmitFinal] does not emit the time and sliding windows.
func Retention(d time.Duration) Option {
	return func(o *options) { o.retention = d; o.set = append(o.set, "Retention") }
}

// WithoutChangelog turns off the changelog of the operation's store: its
// state is lost with the local state directory. Default: logged.
func WithoutChangelog() Option {
	return func(o *options) { o.noLog = true; o.set = append(o.set, "WithoutChangelog") }
}

// Feedback lets a sink ([Stream.To]) write a topic that leads back to it
// through the topology's own sources: a loop that Build otherwise refuses,
// since records would go round it forever. Give it where something on the
// way ends each round, as a process manager that sends commands to an
// aggregate of the same application and reacts to their events and
// outcomes does: its state decides when to stop. A loop without such an
// end runs forever, in an App as in the enginetest driver.
func Feedback() Option {
	return func(o *options) { o.feedback = true; o.set = append(o.set, "Feedback") }
}

// Partitions sets the partition count of a repartition topic. Default: that
// of the topics feeding it.
func Partitions(n int) Option {
	return func(o *options) { o.partitions = n; o.set = append(o.set, "Partitions") }
}

// WithStores attaches stores to a processor added with [Process].
func WithStores(stores ...StoreDef) Option {
	return func(o *options) { o.stores = append(o.stores, stores...); o.set = append(o.set, "WithStores") }
}

// allowed lists the options an operation uses; any other given is an error
// reported by Build.
func (b *Builder) opts(op string, given []Option, allowed ...string) (*options, error) {
	o := &options{}
	for _, f := range given {
		if f != nil {
			f(o)
		}
	}
	var bad []string
	for _, s := range o.set {
		ok := s == "Named"
		for _, a := range allowed {
			ok = ok || s == a
		}
		if !ok {
			bad = append(bad, s)
		}
	}
	for _, s := range o.set {
		if s == "Materialized" && o.store == "" {
			return o, errors.New("Materialized has an empty store name")
		}
		if s == "Named" && o.name == "" {
			return o, errors.New("Named has an empty name")
		}
	}
	if o.partitions < 0 {
		return o, fmt.Errorf("Partitions(%d) must be positive", o.partitions)
	}
	if len(bad) > 0 {
		return o, fmt.Errorf("%s does not use the option(s) %s", op, strings.Join(bad, ", "))
	}
	return o, nil
}

// name gives a node its name: the explicit one, or one derived from the
// operation, its parents' names and how many siblings of the same operation
// came before it. Adding unrelated nodes changes no derived name.
func (b *Builder) name(op string, o *options, parents []*topo.Node, extra string) string {
	b.mustOpen()
	if o != nil && o.name != "" {
		return o.name
	}
	key := op + "|" + extra
	for _, p := range parents {
		key += "|" + p.Name
	}
	n := b.siblings[key]
	b.siblings[key]++
	h := fnv.New32a()
	fmt.Fprintf(h, "%s|%d", key, n)
	return fmt.Sprintf("%s-%08x", op, h.Sum32())
}

// storeName is the store an operation named name writes.
func storeName(o *options, node string) string {
	if o.store != "" {
		return o.store
	}
	return node + "-store"
}

// add records a node; err, if any, is reported by Build under its name.
func (b *Builder) add(n *topo.Node, err error) *topo.Node {
	b.mustOpen()
	if err != nil && n.Err == nil {
		n.Err = err
	}
	return b.g.AddNode(n)
}

func (b *Builder) addStore(o *options, name string) *topo.StoreSpec {
	spec := &topo.StoreSpec{Name: name, Kind: topo.KeyValueStore, Logged: !o.noLog, InMemory: o.inMemory}
	b.g.AddStore(spec)
	return spec
}

// same reports an error when streams from different builders meet.
func (b *Builder) same(other *Builder) error {
	if b != other {
		return errors.New("combines streams or tables from different builders")
	}
	return nil
}

// codec adapts a typed serde to the untyped core.
type codec[T any] struct{ s serde.Serde[T] }

func (c codec[T]) Encode(v any) ([]byte, error) {
	t, ok := v.(T)
	if !ok {
		var zero T
		return nil, fmt.Errorf("engine: value %T is not a %T", v, zero)
	}
	return c.s.Encode(t)
}

func (c codec[T]) Decode(b []byte) (any, error) {
	v, err := c.s.Decode(b)
	if err != nil {
		return nil, err
	}
	return v, nil
}

// SameAs implements topo.SameCodec: only the built-in fixed-format serdes
// (String, Bytes, Int64, Float64) are known to give back the bytes they
// decoded, so only they let a sink reuse a source's key bytes.
func (c codec[T]) SameAs(other topo.Codec) bool {
	o, ok := other.(codec[T])
	if !ok {
		return false
	}
	return canonical(any(c.s)) && any(c.s) == any(o.s)
}

// EncodesFresh implements topo.FreshEncoder: the built-in serdes of
// strings and numbers return new bytes from Encode (serde.Bytes returns the
// slice it is given).
func (c codec[T]) EncodesFresh() bool {
	switch any(c.s) {
	case any(serde.String), any(serde.Int64), any(serde.Float64):
		return true
	}
	return false
}

// DecodeNeverFails implements topo.InfallibleDecoder: serde.String and
// serde.Bytes accept any bytes.
func (c codec[T]) DecodeNeverFails() bool {
	switch any(c.s) {
	case any(serde.String), any(serde.Bytes):
		return true
	}
	return false
}

func canonical(s any) bool {
	switch s {
	case any(serde.String), any(serde.Bytes), any(serde.Int64), any(serde.Float64):
		return true
	}
	return false
}

// keyComparable reports whether keys of type K can be compared with ==
// without a run-time panic.
func keyComparable[K any]() bool {
	t := reflect.TypeFor[K]()
	return t.Kind() != reflect.Interface && t.Comparable()
}

func codecOf[T any](s serde.Serde[T]) topo.Codec {
	if s == nil {
		return nil
	}
	return codec[T]{s}
}

// as converts an untyped value back to its type; nil gives the zero value.
func as[T any](x any) T {
	v, _ := x.(T)
	return v
}

// markUnreadValues lets a source skip decoding values that nobody reads: all
// its children only ask whether a record has a value (counts), nothing times
// the records by their value, and the value codec cannot fail, so a record
// that would not decode cannot exist either.
func markUnreadValues(g *topo.Graph) {
	for _, n := range g.Nodes {
		if n.Kind != topo.SourceNode || n.ChangeValues || n.Timestamps != nil || n.Fuse != nil || len(n.Children) == 0 {
			continue
		}
		d, ok := n.ValueCodec.(topo.InfallibleDecoder)
		if !ok || !d.DecodeNeverFails() {
			continue
		}
		blind := true
		for _, c := range n.Children {
			blind = blind && c.ValueBlind
		}
		n.ValueUnread = blind
	}
}
