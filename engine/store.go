package engine

import (
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// ReadOnlyKeyValueStore reads a key-value store. Ranges are half-open,
// [from, to), in the order of the encoded keys.
type ReadOnlyKeyValueStore[K, V any] interface {
	Get(key K) (value V, ok bool, err error)
	Range(from, to K) iter.Seq2[KeyValue[K, V], error]
	All() iter.Seq2[KeyValue[K, V], error]
}

// KeyValueStore is a key-value store a processor writes. Writes are logged to
// the store's changelog with the timestamp of the record being processed.
type KeyValueStore[K, V any] interface {
	ReadOnlyKeyValueStore[K, V]
	Put(key K, value V) error
	Delete(key K) error
}

// StoreDef declares a store for [WithStores]. Make one with
// [NewKeyValueStore].
type StoreDef interface {
	spec() *topo.StoreSpec
	check() error
}

// KeyValueStoreDef declares a key-value store of a processor.
type KeyValueStoreDef[K, V any] struct {
	s   *topo.StoreSpec
	ks  serde.Serde[K]
	vs  serde.Serde[V]
	err error
}

// NewKeyValueStore declares a key-value store. Options: [InMemory],
// [WithoutChangelog]. Problems (a nil serde, another option) are reported by
// Build on the processor the store is attached to.
func NewKeyValueStore[K, V any](name string, keySerde serde.Serde[K], valueSerde serde.Serde[V], opts ...Option) *KeyValueStoreDef[K, V] {
	o := &options{}
	for _, f := range opts {
		if f != nil {
			f(o)
		}
	}
	var errs []error
	for _, s := range o.set {
		if s != "InMemory" && s != "WithoutChangelog" {
			errs = append(errs, fmt.Errorf("NewKeyValueStore does not use the option %s", s))
		}
	}
	if err := nilSerdes(keySerde == nil, valueSerde == nil); err != nil {
		errs = append(errs, err)
	}
	var err error
	if len(errs) > 0 {
		err = fmt.Errorf("store %q: %w", name, errors.Join(errs...))
	}
	return &KeyValueStoreDef[K, V]{s: &topo.StoreSpec{Name: name, Kind: topo.KeyValueStore, Logged: !o.noLog, InMemory: o.inMemory}, ks: keySerde, vs: valueSerde, err: err}
}

func (d *KeyValueStoreDef[K, V]) spec() *topo.StoreSpec { return d.s }
func (d *KeyValueStoreDef[K, V]) check() error          { return d.err }

// Name is the store's name.
func (d *KeyValueStoreDef[K, V]) Name() string { return d.s.Name }

// Open returns the store for the task of ctx (any *ProcessorContext). Call it
// from a processor's Init; it fails if the store was not attached to the
// processor with [WithStores].
func (d *KeyValueStoreDef[K, V]) Open(ctx StoreContext) (KeyValueStore[K, V], error) {
	if d.ks == nil || d.vs == nil {
		return nil, fmt.Errorf("engine: store %q: %w", d.s.Name, nilSerdes(d.ks == nil, d.vs == nil))
	}
	c := ctx.raw()
	raw, err := c.Store(d.s.Name)
	if err != nil {
		return nil, err
	}
	return &kvStore[K, V]{raw: raw, name: d.s.Name, ks: d.ks, vs: d.vs, now: c.Timestamp}, nil
}

type kvStore[K, V any] struct {
	raw      topo.KVStore
	name     string
	ks       serde.Serde[K]
	vs       serde.Serde[V]
	now      func() time.Time
	readOnly bool
}

var _ KeyValueStore[string, int64] = (*kvStore[string, int64])(nil)

func (s *kvStore[K, V]) serdeErr(part string, b []byte, encode bool, err error) error {
	return &serde.Error{Store: s.name, Partition: -1, Offset: -1, Part: part, Bytes: b, Encode: encode, Err: err}
}

func (s *kvStore[K, V]) Get(key K) (V, bool, error) {
	var zero V
	kb, err := s.ks.Encode(key)
	if err != nil {
		return zero, false, s.serdeErr("key", nil, true, err)
	}
	e, ok, err := s.raw.Get(kb)
	if err != nil || !ok {
		return zero, false, err
	}
	v, err := s.vs.Decode(e.Value)
	if err != nil {
		return zero, false, s.serdeErr("value", e.Value, false, err)
	}
	return v, true, nil
}

func (s *kvStore[K, V]) Put(key K, value V) error {
	if s.readOnly {
		return ErrReadOnly
	}
	kb, err := s.ks.Encode(key)
	if err != nil {
		return s.serdeErr("key", nil, true, err)
	}
	vb, err := s.vs.Encode(value)
	if err != nil {
		return s.serdeErr("value", nil, true, err)
	}
	if vb == nil {
		vb = []byte{}
	}
	return s.raw.Put(kb, vb, s.now().UnixMilli())
}

func (s *kvStore[K, V]) Delete(key K) error {
	if s.readOnly {
		return ErrReadOnly
	}
	kb, err := s.ks.Encode(key)
	if err != nil {
		return s.serdeErr("key", nil, true, err)
	}
	return s.raw.Delete(kb, s.now().UnixMilli())
}

func (s *kvStore[K, V]) Range(from, to K) iter.Seq2[KeyValue[K, V], error] {
	lo, err := s.ks.Encode(from)
	if err != nil {
		return errSeq[K, V](s.serdeErr("key", nil, true, err))
	}
	hi, err := s.ks.Encode(to)
	if err != nil {
		return errSeq[K, V](s.serdeErr("key", nil, true, err))
	}
	return s.scan(lo, hi)
}

func (s *kvStore[K, V]) All() iter.Seq2[KeyValue[K, V], error] { return s.scan(nil, nil) }

func (s *kvStore[K, V]) scan(lo, hi []byte) iter.Seq2[KeyValue[K, V], error] {
	return s.scanRaw(lo, hi, nil)
}

// scanRaw is scan of the entries whose encoded key keep accepts (all if
// keep is nil).
func (s *kvStore[K, V]) scanRaw(lo, hi []byte, keep func([]byte) bool) iter.Seq2[KeyValue[K, V], error] {
	return s.decoded(s.raw.Range(lo, hi), keep)
}

// scanKey is scanRaw of one record key's windows or sessions in a window
// or session store (see topo.RangeKey): lo one of its keys, hi another or
// the end of its keys, suffix the length of the times after it.
func (s *kvStore[K, V]) scanKey(lo, hi []byte, suffix int, keep func([]byte) bool) iter.Seq2[KeyValue[K, V], error] {
	return s.decoded(topo.RangeKey(s.raw, lo, hi, suffix), keep)
}

// decoded decodes the entries of seq whose encoded key keep accepts.
func (s *kvStore[K, V]) decoded(seq iter.Seq2[topo.Entry, error], keep func([]byte) bool) iter.Seq2[KeyValue[K, V], error] {
	return func(yield func(KeyValue[K, V], error) bool) {
		for e, err := range seq {
			if err == nil && keep != nil && !keep(e.Key) {
				continue
			}
			var kv KeyValue[K, V]
			if err == nil {
				if kv.Key, err = s.ks.Decode(e.Key); err != nil {
					err = s.serdeErr("key", e.Key, false, err)
				}
			}
			if err == nil {
				if kv.Value, err = s.vs.Decode(e.Value); err != nil {
					err = s.serdeErr("value", e.Value, false, err)
				}
			}
			if !yield(kv, err) || err != nil {
				return
			}
		}
	}
}

func errSeq[K, V any](err error) iter.Seq2[KeyValue[K, V], error] {
	return func(yield func(KeyValue[K, V], error) bool) { yield(KeyValue[K, V]{}, err) }
}

// kvAccess is the untyped store access of the DSL's stateful processors.
// Table processors (table=true) write through a topo.TableStore, which
// forwards each change — at once, or when the record cache flushes it.
type kvAccess struct {
	st     topo.KVStore
	tbl    *topo.TableStore
	kc, vc topo.Codec
}

func (a *kvAccess) open(c *topo.Context, name string, kc, vc topo.Codec, table bool) error {
	if kc == nil || vc == nil {
		return fmt.Errorf("engine: store %q: %w", name, nilSerdes(kc == nil, vc == nil))
	}
	a.kc, a.vc = kc, vc
	var err error
	if table {
		if a.tbl, err = c.TableStore(name); err == nil {
			a.tbl.SetCodecs(kc, vc)
		}
	} else {
		a.st, err = c.Store(name)
	}
	return err
}

func (a *kvAccess) err(part string, b []byte, encode bool, err error) error {
	name := ""
	if a.tbl != nil {
		name = a.tbl.Name()
	} else if a.st != nil {
		name = a.st.Name()
	}
	return &serde.Error{Store: name, Partition: -1, Offset: -1, Part: part, Bytes: b, Encode: encode, Err: err}
}

// getKey returns r's encoded key, for a following updateKey, and the key's
// value (nil if absent) and timestamp.
func (a *kvAccess) getKey(r topo.Record) ([]byte, any, time.Time, bool, error) {
	kb, ok := topo.RawKey(r, a.kc)
	if !ok {
		var err error
		if kb, err = a.kc.Encode(r.Key); err != nil {
			return nil, nil, time.Time{}, false, a.err("key", nil, true, err)
		}
	}
	v, ts, ok, err := a.getEncoded(kb)
	return kb, v, ts, ok, err
}

func (a *kvAccess) getEncoded(kb []byte) (any, time.Time, bool, error) {
	var err error
	var e topo.Entry
	var ok bool
	if a.tbl != nil {
		e, ok, err = a.tbl.Get(kb)
	} else {
		e, ok, err = a.st.Get(kb)
	}
	if err != nil || !ok {
		return nil, time.Time{}, false, err
	}
	v, err := a.vc.Decode(e.Value)
	if err != nil {
		return nil, time.Time{}, false, a.err("value", e.Value, false, err)
	}
	return v, topo.TimeOf(e.Timestamp), true, nil
}

// update sets r.Key to new (nil deletes it) at ts and forwards r with the
// change from old to new.
func (a *kvAccess) update(r topo.Record, old, new any, ts time.Time) error {
	kb, err := a.kc.Encode(r.Key)
	if err != nil {
		return a.err("key", nil, true, err)
	}
	return a.updateKey(kb, r, old, new, ts)
}

// updateKey is update with r.Key already encoded as kb.
func (a *kvAccess) updateKey(kb []byte, r topo.Record, old, new any, ts time.Time) error {
	var vb []byte
	var err error
	if new != nil {
		if vb, err = a.vc.Encode(new); err != nil {
			return a.err("value", nil, true, err)
		}
		if vb == nil {
			vb = []byte{}
		}
	}
	if f, ok := a.vc.(topo.FreshEncoder); ok && f.EncodesFresh() {
		return a.tbl.UpdateOwned(kb, vb, ts.UnixMilli(), r, old, new)
	}
	return a.tbl.Update(kb, vb, ts.UnixMilli(), r, old, new)
}

// writeQuiet sets the key kb to value at ts without forwarding anything.
func (a *kvAccess) writeQuiet(kb []byte, r topo.Record, value any, ts time.Time) error {
	vb, err := a.vc.Encode(value)
	if err != nil {
		return a.err("value", nil, true, err)
	}
	if vb == nil {
		vb = []byte{}
	}
	return a.tbl.Update(kb, vb, ts.UnixMilli(), r, nil, nil)
}

// expire removes the key kb at ts without forwarding anything (but what
// the cache still held for it).
func (a *kvAccess) expire(kb []byte, ts time.Time) error {
	return a.tbl.Expire(kb, ts.UnixMilli())
}

func (a *kvAccess) put(key, value any, ts time.Time) error {
	kb, err := a.kc.Encode(key)
	if err != nil {
		return a.err("key", nil, true, err)
	}
	vb, err := a.vc.Encode(value)
	if err != nil {
		return a.err("value", nil, true, err)
	}
	if vb == nil {
		vb = []byte{}
	}
	return a.st.Put(kb, vb, ts.UnixMilli())
}

func (a *kvAccess) delete(key any, ts time.Time) error {
	kb, err := a.kc.Encode(key)
	if err != nil {
		return a.err("key", nil, true, err)
	}
	return a.st.Delete(kb, ts.UnixMilli())
}
