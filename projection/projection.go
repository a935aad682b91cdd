package projection

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"reflect"
	"slices"
	"strconv"
	"time"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// Kind is what a view can answer.
type Kind string

// The kinds of view.
const (
	// KeyValue views answer point reads, key ranges and prefix scans.
	KeyValue Kind = "key-value"
	// Windowed views answer a key's windows over a time range.
	Windowed Kind = "windowed"
	// CountWindowed views answer a key's count windows (windows of a
	// number of its records: engine.CountWindows).
	CountWindowed Kind = "count-windowed"
)

// View is a named, queryable table of a running topology: a store, the
// serdes of its keys and values, and how a key is written in a URL. Make
// one with [NewKeyValue]; register it in a [Registry].
type View struct {
	name, store string
	kind        Kind
	// keySchema and valueSchema describe the JSON of keys and values
	// (JSONSchema of their Go types).
	keySchema, valueSchema map[string]any
	// parseKey turns a key as written in a URL into the store's key bytes.
	parseKey func(string) ([]byte, error)
	// key and value turn stored bytes into what a JSON answer holds.
	key, value func([]byte) (any, error)
	// prefixable: the keys are strings or bytes, whose encoding is the
	// text itself, so a prefix of the text is a prefix of the bytes.
	prefixable bool
	// fetch reads a key's windows that start in [from, to] (windowed
	// views); fetchCount a key's count windows (count-windowed views).
	fetch      func(q engine.Queryable, key string, from, to time.Time) ([]WindowEntry, error)
	fetchCount func(q engine.Queryable, key string) ([]CountWindowEntry, error)
	// windowSize and windowRecords are the size of the windows of a
	// windowed or a count-windowed view.
	windowSize    time.Duration
	windowRecords int64
}

// WindowEntry is one window of a key of a windowed view.
type WindowEntry struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	Value any       `json:"value"`
}

// CountWindowEntry is one count window of a key of a count-windowed
// view: its records' numbers, [Start, End).
type CountWindowEntry struct {
	Start int64 `json:"start"`
	End   int64 `json:"end"`
	Value any   `json:"value"`
}

// WindowKey is a stored key of a windowed or count-windowed view, as a
// scan or a change answers it: the record key and its window (Start and
// End times for time windows, record numbers for count windows).
type WindowKey struct {
	Key   any `json:"key"`
	Start any `json:"start"`
	End   any `json:"end"`
}

// NewWindowed declares a view of a windowed aggregation's store (its
// Materialized name), whose windows have the given size.
func NewWindowed[K, V any](name, store string, keys serde.Serde[K], values serde.Serde[V], size time.Duration, opts ...Option) (*View, error) {
	var bad string
	if size <= 0 {
		bad = fmt.Sprintf("the window size %v must be positive", size)
	}
	v, parse, err := newWindowedView(name, store, keys, values, Windowed, bad, opts)
	if err != nil {
		return nil, err
	}
	v.windowSize = size
	wkeys := engine.WindowedSerde(keys, size)
	v.key = func(b []byte) (any, error) {
		w, err := wkeys.Decode(b)
		return WindowKey{Key: w.Key, Start: w.Window.Start.UTC(), End: w.Window.End.UTC()}, err
	}
	v.fetch = func(q engine.Queryable, key string, from, to time.Time) ([]WindowEntry, error) {
		k, err := parse(key)
		if err != nil {
			return nil, err
		}
		st, err := engine.QueryWindowStore(q, store, keys, values, size)
		if err != nil {
			return nil, err
		}
		out := []WindowEntry{}
		for kv, err := range st.Fetch(k, from, to) {
			if err != nil {
				return nil, err
			}
			out = append(out, WindowEntry{Start: kv.Key.Window.Start.UTC(), End: kv.Key.Window.End.UTC(), Value: kv.Value})
		}
		return out, nil
	}
	return v, nil
}

// NewCountWindowed declares a view of a count-windowed aggregation's store
// (its Materialized name), whose windows have size records.
func NewCountWindowed[K, V any](name, store string, keys serde.Serde[K], values serde.Serde[V], size int64, opts ...Option) (*View, error) {
	var bad string
	if size < 1 {
		bad = fmt.Sprintf("the window size %d must be at least 1 record", size)
	}
	v, parse, err := newWindowedView(name, store, keys, values, CountWindowed, bad, opts)
	if err != nil {
		return nil, err
	}
	v.windowRecords = size
	wkeys := engine.CountWindowedSerde(keys, size)
	v.key = func(b []byte) (any, error) {
		w, err := wkeys.Decode(b)
		return WindowKey{Key: w.Key, Start: w.Window.Start, End: w.Window.End}, err
	}
	v.fetchCount = func(q engine.Queryable, key string) ([]CountWindowEntry, error) {
		k, err := parse(key)
		if err != nil {
			return nil, err
		}
		st, err := engine.QueryCountWindowStore(q, store, keys, values, size)
		if err != nil {
			return nil, err
		}
		out := []CountWindowEntry{}
		for kv, err := range st.Fetch(k) {
			if err != nil {
				return nil, err
			}
			out = append(out, CountWindowEntry{Start: kv.Key.Window.Start, End: kv.Key.Window.End, Value: kv.Value})
		}
		return out, nil
	}
	return v, nil
}

// newWindowedView is NewKeyValue for a view whose stored keys are windows
// of kind (no prefix scans), refused with bad if that is not empty; parse
// reads a key written in a URL (an error: ErrBadKey).
func newWindowedView[K, V any](name, store string, keys serde.Serde[K], values serde.Serde[V], kind Kind, bad string, opts []Option) (*View, func(string) (K, error), error) {
	v, err := NewKeyValue(name, store, keys, values, opts...)
	if err != nil {
		return nil, nil, err
	}
	if bad != "" {
		return nil, nil, fmt.Errorf("projection: view %q: %s", name, bad)
	}
	var o viewOptions
	for _, f := range opts {
		f(&o)
	}
	parseKey, _ := keyParser[K](o.parseKey)
	v.kind, v.prefixable = kind, false
	parse := func(s string) (K, error) {
		k, err := parseKey(s)
		if err != nil {
			return k, fmt.Errorf("%w for view %s: %v", ErrBadKey, name, err)
		}
		return k, nil
	}
	return v, parse, nil
}

// ErrNotWindowed is the error of a windowed fetch from a view of another
// kind.
var ErrNotWindowed = errors.New("projection: the view is not windowed")

// ErrWindowed is the error of a point read of a windowed or count-windowed
// view, whose keys are windows: read a key's windows (Fetch, FetchCount).
var ErrWindowed = errors.New("projection: the view is windowed: read a key's windows")

// Fetch reads the windows of a key (as written in a URL) that start in
// [from, to], earliest first. A key of another instance is an
// *engine.NotLocalError naming it.
func (v *View) Fetch(q engine.Queryable, key string, from, to time.Time) ([]WindowEntry, error) {
	if v.fetch == nil {
		return nil, fmt.Errorf("%w by time (view %s is %s)", ErrNotWindowed, v.name, v.kind)
	}
	return v.fetch(q, key, from, to)
}

// FetchCount reads the count windows of a key (as written in a URL) of a
// count-windowed view, earliest first: the full ones the aggregation keeps
// and the one filling. A key of another instance is an
// *engine.NotLocalError naming it.
func (v *View) FetchCount(q engine.Queryable, key string) ([]CountWindowEntry, error) {
	if v.fetchCount == nil {
		return nil, fmt.Errorf("%w by count (view %s is %s)", ErrNotWindowed, v.name, v.kind)
	}
	return v.fetchCount(q, key)
}

// Option tunes a view.
type Option func(*viewOptions)

type viewOptions struct {
	parseKey any    // func(string) (K, error)
	name     string // Named
}

// ParseKey sets how a key written in a URL (a path segment or a query
// parameter, unescaped) becomes a K. Default: the text itself for string
// keys, a decimal number for integer keys, JSON for any other type.
func ParseKey[K any](fn func(string) (K, error)) Option {
	return func(o *viewOptions) { o.parseKey = fn }
}

// NewKeyValue declares a view of a key-value store (a table's or an
// aggregation's Materialized name) whose keys and values the serdes read.
// Values are answered as JSON (encoding/json of V).
func NewKeyValue[K, V any](name, store string, keys serde.Serde[K], values serde.Serde[V], opts ...Option) (*View, error) {
	var o viewOptions
	for _, f := range opts {
		f(&o)
	}
	var errs []error
	if name == "" || !validName(name) {
		errs = append(errs, fmt.Errorf("view name %q: use letters, digits, '-', '_' and '.'", name))
	}
	if store == "" {
		errs = append(errs, errors.New("the store name is empty"))
	}
	if keys == nil || values == nil {
		errs = append(errs, errors.New("the key and value serdes must be set"))
	}
	parse, err := keyParser[K](o.parseKey)
	if err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("projection: view %q: %w", name, err)
	}
	kt := reflect.TypeFor[K]()
	return &View{
		name: name, store: store, kind: KeyValue,
		keySchema: JSONSchema(kt), valueSchema: JSONSchema(reflect.TypeFor[V]()),
		parseKey: func(s string) ([]byte, error) {
			k, err := parse(s)
			if err != nil {
				return nil, err
			}
			return keys.Encode(k)
		},
		key: func(b []byte) (any, error) {
			k, err := keys.Decode(b)
			return k, err
		},
		value: func(b []byte) (any, error) {
			v, err := values.Decode(b)
			return v, err
		},
		prefixable: kt.Kind() == reflect.String || (kt.Kind() == reflect.Slice && kt.Elem().Kind() == reflect.Uint8),
	}, nil
}

func validName(s string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

// keyParser is the default way to read a K from a URL, or the one given.
func keyParser[K any](given any) (func(string) (K, error), error) {
	if given != nil {
		fn, ok := given.(func(string) (K, error))
		if !ok {
			return nil, fmt.Errorf("ParseKey is given a %T, but the keys are %v", given, reflect.TypeFor[K]())
		}
		return fn, nil
	}
	var zero K
	switch any(zero).(type) {
	case string:
		return func(s string) (K, error) { return any(s).(K), nil }, nil
	case []byte:
		return func(s string) (K, error) { return any([]byte(s)).(K), nil }, nil
	case int64:
		return func(s string) (K, error) {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return zero, fmt.Errorf("%q is not an integer", s)
			}
			return any(n).(K), nil
		}, nil
	}
	want := jsonType(JSONSchema(reflect.TypeFor[K]()))
	return func(s string) (K, error) {
		var k K
		if err := json.Unmarshal([]byte(s), &k); err != nil {
			// In JSON's terms: the caller never saw the Go type.
			return k, fmt.Errorf("%q is not a key of this view: want JSON (%s)", s, want)
		}
		return k, nil
	}, nil
}

// Name is the view's name.
func (v *View) Name() string { return v.name }

// Store is the name of the view's store.
func (v *View) Store() string { return v.store }

// Kind is what the view answers.
func (v *View) Kind() Kind { return v.kind }

// Schema describes the view: its name, kind and the Go types of its keys
// and values.
type Schema struct {
	Name string `json:"name"`
	Kind Kind   `json:"kind"`
	// Store is the engine's store the view reads.
	Store string `json:"store"`
	// KeyType and ValueType are the JSON types of keys and values
	// ("string", "integer", "object", …); KeySchema and ValueSchema
	// describe them whole, as JSON Schemas (JSONSchema).
	KeyType     string         `json:"keyType"`
	ValueType   string         `json:"valueType"`
	KeySchema   map[string]any `json:"keySchema"`
	ValueSchema map[string]any `json:"valueSchema"`
	Prefix      bool           `json:"prefixScans"` // keys are text: prefix scans work
}

// Schema describes the view.
func (v *View) Schema() Schema {
	return Schema{Name: v.name, Kind: v.kind, Store: v.store, KeyType: jsonType(v.keySchema), ValueType: jsonType(v.valueSchema),
		KeySchema: v.keySchema, ValueSchema: v.valueSchema, Prefix: v.prefixable}
}

// Entry is one key of a view, decoded.
type Entry struct {
	Key   any `json:"key"`
	Value any `json:"value"`
	// raw is the stored key, for cursors.
	raw []byte
}

// RawKey is the entry's key as stored (the bytes a cursor starts after).
func (e Entry) RawKey() []byte { return e.raw }

// ErrBadKey wraps the error of a key that does not parse or encode.
var ErrBadKey = errors.New("projection: bad key")

// ErrNoPrefix is the error of a prefix scan of a view whose keys are not
// text.
var ErrNoPrefix = errors.New("projection: prefix scans need text keys")

// EncodeKey turns a key written in a URL into the store's key bytes.
func (v *View) EncodeKey(s string) ([]byte, error) {
	b, err := v.parseKey(s)
	if err != nil {
		return nil, fmt.Errorf("%w for view %s: %v", ErrBadKey, v.name, err)
	}
	return b, nil
}

// IsOf says whether a stored key (of the view's store or its changelog)
// belongs to the key encoded as kb (EncodeKey): is it, or, in a windowed
// view, is one of its windows.
func (v *View) IsOf(stored, kb []byte) bool {
	if v.kind == KeyValue {
		return bytes.Equal(stored, kb)
	}
	// A window's key is the record key's bytes and 8 more.
	return len(stored) == len(kb)+8 && bytes.HasPrefix(stored, kb)
}

// Get reads a key (as written in a URL) from q's committed state. A key of
// another instance is an *engine.NotLocalError naming it.
func (v *View) Get(q engine.Queryable, key string) (Entry, bool, error) {
	if v.kind != KeyValue {
		return Entry{}, false, fmt.Errorf("%w (view %s)", ErrWindowed, v.name)
	}
	kb, err := v.EncodeKey(key)
	if err != nil {
		return Entry{}, false, err
	}
	st, err := q.LocalStore(v.store)
	if err != nil {
		return Entry{}, false, err
	}
	e, ok, err := st.Get(kb)
	if err != nil || !ok {
		return Entry{}, false, err
	}
	return v.decode(e.Key, e.Value)
}

// Decode reads a stored key and value (a nil value: a deleted key, the
// entry's Value nil).
func (v *View) Decode(kb, vb []byte) (Entry, error) {
	if vb == nil {
		k, err := v.key(kb)
		if err != nil {
			return Entry{}, fmt.Errorf("projection: view %s: a stored key: %w", v.name, err)
		}
		return Entry{Key: k, raw: bytes.Clone(kb)}, nil
	}
	e, _, err := v.decode(kb, vb)
	return e, err
}

func (v *View) decode(kb, vb []byte) (Entry, bool, error) {
	k, err := v.key(kb)
	if err != nil {
		return Entry{}, false, fmt.Errorf("projection: view %s: a stored key: %w", v.name, err)
	}
	val, err := v.value(vb)
	if err != nil {
		return Entry{}, false, fmt.Errorf("projection: view %s: the value of %v: %w", v.name, k, err)
	}
	return Entry{Key: k, Value: val, raw: bytes.Clone(kb)}, true, nil
}

// Scan says which keys a range read covers: [From, To) by the keys' stored
// order (empty: unbounded), or those that start with Prefix, starting
// after the stored key After (a cursor).
type Scan struct {
	From, To, Prefix string
	HasFrom, HasTo   bool
	After            []byte
}

// Range iterates the view's entries that the scan covers, in the
// partitions q holds, in stored key order.
func (v *View) Range(q engine.Queryable, s Scan) (iter.Seq2[Entry, error], error) {
	var lo, hi []byte
	var err error
	if s.Prefix != "" {
		if !v.prefixable {
			return nil, fmt.Errorf("%w (view %s has %s keys)", ErrNoPrefix, v.name, jsonType(v.keySchema))
		}
		if lo, err = v.EncodeKey(s.Prefix); err != nil {
			return nil, err
		}
		hi = prefixEnd(lo)
	}
	if s.HasFrom {
		b, err := v.EncodeKey(s.From)
		if err != nil {
			return nil, err
		}
		if lo == nil || bytes.Compare(b, lo) > 0 {
			lo = b
		}
	}
	if s.HasTo {
		b, err := v.EncodeKey(s.To)
		if err != nil {
			return nil, err
		}
		if hi == nil || bytes.Compare(b, hi) < 0 {
			hi = b
		}
	}
	if s.After != nil {
		next := append(slices.Clone(s.After), 0) // the first key after it
		if lo == nil || bytes.Compare(next, lo) > 0 {
			lo = next
		}
	}
	st, err := q.LocalStore(v.store)
	if err != nil {
		return nil, err
	}
	return func(yield func(Entry, error) bool) {
		if hi != nil && lo != nil && bytes.Compare(lo, hi) >= 0 {
			return
		}
		for e, err := range st.Range(lo, hi) {
			if err != nil {
				yield(Entry{}, err)
				return
			}
			en, _, err := v.decode(e.Key, e.Value)
			if !yield(en, err) || err != nil {
				return
			}
		}
	}, nil
}

func prefixEnd(prefix []byte) []byte {
	end := bytes.Clone(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// Registry is the set of views an instance serves.
type Registry struct {
	views map[string]*View
}

// NewRegistry checks and registers views (names must be unique).
func NewRegistry(views ...*View) (*Registry, error) {
	r := &Registry{views: map[string]*View{}}
	var errs []error
	for _, v := range views {
		if v == nil {
			errs = append(errs, errors.New("a nil view"))
			continue
		}
		if r.views[v.name] != nil {
			errs = append(errs, fmt.Errorf("view name %q is registered twice", v.name))
			continue
		}
		r.views[v.name] = v
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("projection: %w", err)
	}
	return r, nil
}

// View returns the view of that name.
func (r *Registry) View(name string) (*View, bool) {
	v, ok := r.views[name]
	return v, ok
}

// Views are the registered views, by name.
func (r *Registry) Views() []*View {
	out := make([]*View, 0, len(r.views))
	for _, v := range r.views {
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b *View) int {
		if a.name < b.name {
			return -1
		}
		if a.name > b.name {
			return 1
		}
		return 0
	})
	return out
}
