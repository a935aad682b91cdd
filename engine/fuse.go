package engine

import (
	"reflect"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// Fused lines (see the topo package's doc on fusion): the stateless
// operations of a Stream record, in their node's Typed field, a typed step
// that Build links into one function when a source's records go down a line
// of such steps to one sink or Foreach, with no branch and no other parent on
// the way. Each step is the same operation as the node's processor, minus the
// boxing: a tombstone is a flag beside the zero value rather than a nil
// value, and a null key stays the source's raw nil as long as no step sets a
// key. Lines whose types include an interface are left to the generic path,
// where a nil interface value means a tombstone or a null key.

// emit is a step of a fused line: the record's key and value, and whether
// it is a tombstone (then v is the zero value).
type emit[K, V any] func(k K, v V, tomb bool) error

// line is what the steps of one task's fused line share: the record being
// run.
type line struct {
	env topo.FuseEnv
	in  topo.Input
	ts  int64
}

// fuseStart is a source's step.
type fuseStart interface {
	start(l *line, first any) topo.Fused
}

// fuseStep is a step in the middle of a line.
type fuseStep interface {
	// link returns the step's emit, given the next step's; the emit counts
	// the records reaching the step's node in seen.
	link(l *line, next any, seen *int64) any
	// keepsKey: the step never changes the key.
	keepsKey() bool
}

// fuseEnd is the last step: a sink or Foreach.
type fuseEnd interface {
	// end returns the step's emit, which counts the records reaching the
	// node in seen; keyKept says that every record reaching it has the key
	// its source read.
	end(l *line, src *topo.Node, keyKept bool, seen *int64) any
}

// plain: no interface type, whose nil would mean a null key or tombstone.
func plain[T any]() bool { return reflect.TypeFor[T]().Kind() != reflect.Interface }

// fuse gives every stream source whose records go down a line of typed
// steps its Fuse.
func fuse(g *topo.Graph) {
	for _, src := range g.Nodes {
		start, ok := src.Typed.(fuseStart)
		if !ok || src.Kind != topo.SourceNode || src.ChangeValues {
			continue
		}
		var mid []fuseStep
		var midNodes []*topo.Node
		var end fuseEnd
		var endNode *topo.Node
		keyKept := true
		for n := src; end == nil; {
			if len(n.Children) != 1 {
				break
			}
			n = n.Children[0]
			if len(n.Parents) != 1 || len(n.Stores) > 0 {
				break
			}
			switch s := n.Typed.(type) {
			case fuseStep:
				mid, midNodes = append(mid, s), append(midNodes, n)
				keyKept = keyKept && s.keepsKey()
				continue
			case fuseEnd:
				if len(n.Children) == 0 {
					end, endNode = s, n
				}
			}
			break
		}
		if end == nil {
			continue
		}
		src.Fuse = func(env topo.FuseEnv) topo.Fused {
			l := &line{env: env}
			next := end.end(l, src, keyKept, env.Seen(endNode))
			for i := len(mid) - 1; i >= 0; i-- {
				next = mid[i].link(l, next, env.Seen(midNodes[i]))
			}
			return start.start(l, next)
		}
	}
}

// sourceStep decodes a stream source's records.
type sourceStep[K, V any] struct {
	ks serde.Serde[K]
	vs serde.Serde[V]
}

func newSourceStep[K, V any](ks serde.Serde[K], vs serde.Serde[V]) any {
	if ks == nil || vs == nil || !plain[K]() || !plain[V]() {
		return nil
	}
	return sourceStep[K, V]{ks, vs}
}

func (s sourceStep[K, V]) start(l *line, first any) topo.Fused {
	return &fusedSource[K, V]{l: l, ks: s.ks, vs: s.vs, next: first.(emit[K, V])}
}

type fusedSource[K, V any] struct {
	l    *line
	ks   serde.Serde[K]
	vs   serde.Serde[V]
	next emit[K, V]
	// The decoded record.
	k             K
	v             V
	nullKey, tomb bool
}

func (f *fusedSource[K, V]) Decode(in topo.Input) error {
	var k K
	var v V
	if in.Key != nil {
		var err error
		if k, err = f.ks.Decode(in.Key); err != nil {
			return &serde.Error{Topic: in.Topic, Partition: in.Partition, Offset: in.Offset, Part: "key", Bytes: in.Key, Err: err}
		}
	}
	if in.Value != nil {
		var err error
		if v, err = f.vs.Decode(in.Value); err != nil {
			return &serde.Error{Topic: in.Topic, Partition: in.Partition, Offset: in.Offset, Part: "value", Bytes: in.Value, Err: err}
		}
	}
	f.k, f.v, f.nullKey, f.tomb = k, v, in.Key == nil, in.Value == nil
	return nil
}

func (f *fusedSource[K, V]) Boxed() (key, value any) {
	if !f.nullKey {
		key = f.k
	}
	if !f.tomb {
		value = f.v
	}
	return key, value
}

func (f *fusedSource[K, V]) Run(in topo.Input, ts int64) error {
	f.l.in, f.l.ts = in, ts
	err := f.next(f.k, f.v, f.tomb)
	// Hold on to nothing of the record (its bytes may share a fetched
	// batch's buffer).
	var k K
	var v V
	f.k, f.v, f.l.in = k, v, topo.Input{}
	return err
}

// sinkStep encodes and sends, as nodeInst.sink does.
type sinkStep[K, V any] struct {
	node *topo.Node
	ks   serde.Serde[K]
	vs   serde.Serde[V]
	// part is the sink's partitioner (RepartitionBy), typed; nil: by the
	// key.
	part func(K, V, int) []int
}

func newSinkStep[K, V any](n *topo.Node, ks serde.Serde[K], vs serde.Serde[V]) any {
	if ks == nil || vs == nil || !plain[K]() || !plain[V]() {
		return nil
	}
	return sinkStep[K, V]{node: n, ks: ks, vs: vs}
}

// partitions is topo.Output.Partitions for a record (its own function, so
// that the emit of a sink without a partitioner captures nothing).
func (s sinkStep[K, V]) partitions(k K, v V) func(n int) []int {
	return func(n int) []int { return s.part(k, v, n) }
}

func (s sinkStep[K, V]) end(l *line, src *topo.Node, keyKept bool, seen *int64) any {
	topic := l.env.TopicName(s.node.Ref())
	// The source's key bytes can be written as they are if the key is
	// still the one they were decoded to and the codecs agree (see
	// topo.RawKey).
	sc, ok := s.node.KeyCodec.(topo.SameCodec)
	raw := keyKept && s.node.KeyComparable && ok && sc.SameAs(src.KeyCodec)
	fail := func(part string, err error) error {
		return &serde.Error{Topic: topic, Partition: -1, Offset: -1, Part: part, Encode: true, Err: err}
	}
	return emit[K, V](func(k K, v V, tomb bool) error {
		*seen++
		if keyKept && l.in.Key == nil && s.node.DropNullKeys {
			l.env.Skip(s.node, "null key")
			return nil
		}
		out := topo.Output{Topic: topic, Partition: topo.AnyPartition, Timestamp: l.ts, Headers: l.in.Headers}
		if raw || keyKept && l.in.Key == nil {
			out.Key = l.in.Key
		} else {
			b, err := s.ks.Encode(k)
			if err != nil {
				return fail("key", err)
			}
			out.Key = b
		}
		if !tomb {
			b, err := s.vs.Encode(v)
			if err != nil {
				return fail("value", err)
			}
			if b == nil {
				b = []byte{}
			}
			out.Value = b
		}
		if s.part != nil {
			out.Partitions = s.partitions(k, v)
		}
		return l.env.Send(out)
	})
}

type foreachStep[K, V any] struct{ fn func(K, V) }

func (s foreachStep[K, V]) end(_ *line, _ *topo.Node, _ bool, seen *int64) any {
	return emit[K, V](func(k K, v V, tomb bool) error {
		*seen++
		if !tomb {
			s.fn(k, v)
		}
		return nil
	})
}

type filterStep[K, V any] struct {
	pred func(K, V) bool
	want bool
}

func (s filterStep[K, V]) keepsKey() bool { return true }

func (s filterStep[K, V]) link(_ *line, next any, seen *int64) any {
	n := next.(emit[K, V])
	return emit[K, V](func(k K, v V, tomb bool) error {
		*seen++
		if tomb || s.pred(k, v) == s.want {
			return n(k, v, tomb)
		}
		return nil
	})
}

type peekStep[K, V any] struct{ fn func(K, V) }

func (s peekStep[K, V]) keepsKey() bool { return true }

func (s peekStep[K, V]) link(_ *line, next any, seen *int64) any {
	n := next.(emit[K, V])
	return emit[K, V](func(k K, v V, tomb bool) error {
		*seen++
		if !tomb {
			s.fn(k, v)
		}
		return n(k, v, tomb)
	})
}

type mapValuesStep[K, V, V2 any] struct{ fn func(K, V) V2 }

func (s mapValuesStep[K, V, V2]) keepsKey() bool { return true }

func (s mapValuesStep[K, V, V2]) link(_ *line, next any, seen *int64) any {
	n := next.(emit[K, V2])
	return emit[K, V](func(k K, v V, tomb bool) error {
		*seen++
		if tomb {
			var z V2
			return n(k, z, true)
		}
		return n(k, s.fn(k, v), false)
	})
}

type flatMapValuesStep[K, V, V2 any] struct{ fn func(K, V) []V2 }

func (s flatMapValuesStep[K, V, V2]) keepsKey() bool { return true }

func (s flatMapValuesStep[K, V, V2]) link(_ *line, next any, seen *int64) any {
	n := next.(emit[K, V2])
	return emit[K, V](func(k K, v V, tomb bool) error {
		*seen++
		if tomb {
			var z V2
			return n(k, z, true)
		}
		for _, v2 := range s.fn(k, v) {
			if err := n(k, v2, false); err != nil {
				return err
			}
		}
		return nil
	})
}

// A step that sets the key drops tombstones, as its processor does.

// mapStep is Map's step, and SelectKey's (then what is "SelectKey").
type mapStep[K, V, K2, V2 any] struct {
	node *topo.Node
	what string
	fn   func(K, V) (K2, V2)
}

func (s mapStep[K, V, K2, V2]) keepsKey() bool { return false }

func (s mapStep[K, V, K2, V2]) link(l *line, next any, seen *int64) any {
	n := next.(emit[K2, V2])
	return emit[K, V](func(k K, v V, tomb bool) error {
		*seen++
		if tomb {
			l.env.Skip(s.node, "tombstone in "+s.what)
			return nil
		}
		k2, v2 := s.fn(k, v)
		return n(k2, v2, false)
	})
}

type flatMapStep[K, V, K2, V2 any] struct {
	node *topo.Node
	fn   func(K, V) []KeyValue[K2, V2]
}

func (s flatMapStep[K, V, K2, V2]) keepsKey() bool { return false }

func (s flatMapStep[K, V, K2, V2]) link(l *line, next any, seen *int64) any {
	n := next.(emit[K2, V2])
	return emit[K, V](func(k K, v V, tomb bool) error {
		*seen++
		if tomb {
			l.env.Skip(s.node, "tombstone in FlatMap")
			return nil
		}
		for _, kv := range s.fn(k, v) {
			if err := n(kv.Key, kv.Value, false); err != nil {
				return err
			}
		}
		return nil
	})
}
