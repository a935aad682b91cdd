package engine_test

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// Fusion compiles a source's line of stateless operations into one typed
// function (see fuse.go). TestDSL runs every data-driven case with and
// without it; these cases add what the data files cannot write: which
// topologies get a fused line, and the edges a line must treat as the
// generic path does (null keys, bytes that do not decode or encode,
// timestamp functions, headers).

func TestFusedSources(t *testing.T) {
	build := func(f func(b *engine.Builder)) *engine.Topology {
		t.Helper()
		b := engine.NewBuilder()
		f(b)
		top, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		return top
	}
	ints := func(b *engine.Builder) *engine.Stream[string, int64] {
		return engine.NewStream(b, "in", serde.String, serde.Int64, engine.Named("src"))
	}
	cases := []struct {
		name string
		top  *engine.Topology
		want []string
	}{
		{"the benchmark's filter and map", statelessTopology("in", "out"), []string{"source-b6e49247"}},
		{"every stateless step", build(func(b *engine.Builder) {
			s := ints(b).Filter(dslPositive).FilterNot(dslPositive).Peek(func(string, int64) {})
			s2 := engine.FlatMapValues(engine.MapValues(s, func(_ string, v int64) string { return strconv.FormatInt(v, 10) }), func(_ string, v string) []string { return []string{v} })
			s3 := engine.SelectKey(engine.Map(s2, func(k, v string) (string, string) { return v, k }), func(k, _ string) string { return k })
			engine.FlatMap(s3, func(k, v string) []engine.KeyValue[string, string] { return nil }).Foreach(func(string, string) {})
		}), []string{"src"}},
		{"a branch", build(func(b *engine.Builder) {
			s := ints(b)
			s.To("a")
			s.To("b")
		}), nil},
		{"a merge", build(func(b *engine.Builder) {
			ints(b).Merge(engine.NewStream(b, "in2", serde.String, serde.Int64)).To("out")
		}), nil},
		{"a stateful step", build(func(b *engine.Builder) {
			ints(b).GroupByKey().Count().ToStream().To("out")
		}), nil},
		{"an interface value", build(func(b *engine.Builder) {
			engine.MapValues(ints(b), func(_ string, v int64) any { return v }).Foreach(func(string, any) {})
		}), nil},
		{"the line after a repartition", build(func(b *engine.Builder) {
			engine.SelectKey(ints(b), func(k string, _ int64) string { return k }).Repartition(engine.Named("re")).To("out")
		}), []string{"src", "re-source"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := engine.FusedSources(c.top)
			slices.Sort(got)
			slices.Sort(c.want)
			if !slices.Equal(got, c.want) {
				t.Errorf("fused sources %v, want %v", got, c.want)
			}
		})
	}
}

// failingString encodes and decodes strings, refusing "bad".
var failingString = serde.Func(func(s string) ([]byte, error) {
	if s == "bad" {
		return nil, errors.New("refuses to encode bad")
	}
	return []byte(s), nil
}, func(b []byte) (string, error) {
	if string(b) == "bad" {
		return "", errors.New("refuses to decode bad")
	}
	return string(b), nil
})

func TestFusedLineMatchesGenericPath(t *testing.T) {
	type rec struct {
		key, value []byte
		ms         int64
		headers    []engine.Header
	}
	cases := []struct {
		name  string
		build func(b *engine.Builder)
		in    []rec
	}{
		{"null keys and tombstones through MapValues", func(b *engine.Builder) {
			s := engine.NewStream(b, "in", serde.String, serde.String)
			engine.MapValues(s, func(k, v string) string { return k + "/" + v }).To("out")
		}, []rec{{nil, []byte("a"), 1, nil}, {[]byte("k"), nil, 2, nil}, {nil, nil, 3, nil}, {[]byte("k"), []byte(""), 4, nil}}},
		{"null keys given a key by Map, tombstones dropped", func(b *engine.Builder) {
			s := engine.NewStream(b, "in", serde.String, serde.String)
			engine.Map(s, func(k, v string) (string, string) { return k + "!", v }).To("out")
		}, []rec{{nil, []byte("a"), 1, nil}, {[]byte("k"), nil, 2, nil}, {[]byte("k"), []byte("b"), 3, nil}}},
		{"a key codec that cannot reuse bytes", func(b *engine.Builder) {
			engine.NewStream(b, "in", failingString, serde.String).Filter(func(string, string) bool { return true }).To("out")
		}, []rec{{[]byte("k"), []byte("a"), 1, nil}, {nil, []byte("b"), 2, nil}, {[]byte("bad"), []byte("c"), 3, nil}, {[]byte("k"), []byte("bad"), 4, nil}}},
		{"values the sink cannot encode", func(b *engine.Builder) {
			s := engine.NewStream(b, "in", serde.String, serde.String)
			engine.MapValues(s, func(_, v string) string { return v }).WithSerdes(nil, failingString).To("out")
		}, []rec{{[]byte("k"), []byte("bad"), 1, nil}, {[]byte("k"), []byte("ok"), 2, nil}}},
		{"keys the sink cannot encode", func(b *engine.Builder) {
			s := engine.NewStream(b, "in", serde.String, serde.String)
			engine.SelectKey(s, func(_, v string) string { return v }).WithSerdes(failingString, nil).To("out")
		}, []rec{{[]byte("k"), []byte("bad"), 1, nil}, {[]byte("k"), []byte("ok"), 2, nil}}},
		{"values that do not decode", func(b *engine.Builder) {
			engine.NewStream(b, "in", serde.String, serde.Int64).Filter(dslPositive).To("out")
		}, []rec{{[]byte("k"), []byte("xyz"), 1, nil}, {[]byte("k"), i64(5), 2, nil}}},
		{"a timestamp function, headers kept", func(b *engine.Builder) {
			ts := engine.WithTimestamps(func(_ string, v int64, _ time.Time) (time.Time, error) {
				if v < 0 {
					return time.Time{}, fmt.Errorf("value %d has no time", v)
				}
				return enginetest.At(v), nil
			})
			engine.NewStream(b, "in", serde.String, serde.Int64, ts).Peek(func(string, int64) {}).To("out")
		}, []rec{{[]byte("k"), i64(50), 1, []engine.Header{{Key: "h", Value: []byte("v")}}}, {[]byte("k"), nil, 2, nil}, {[]byte("k"), i64(-1), 3, nil}}},
		{"negative recorded times", func(b *engine.Builder) {
			engine.NewStream(b, "in", serde.String, serde.String).To("out")
		}, []rec{{[]byte("k"), []byte("a"), -5, nil}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := engine.NewBuilder()
			c.build(b)
			top, err := b.Build()
			if err != nil {
				t.Fatal(err)
			}
			if len(engine.FusedSources(top)) == 0 {
				t.Fatal("the case's topology has no fused line")
			}
			run := func(top *engine.Topology) (out []string) {
				d := enginetest.New(t, top)
				for _, r := range c.in {
					err := d.PipeBytes("in", r.key, r.value, enginetest.At(r.ms), r.headers...)
					out = append(out, fmt.Sprintf("error: %v", err))
				}
				for _, m := range d.Messages("out") {
					out = append(out, fmt.Sprintf("%q %q @%d %v", m.Key, m.Value, m.Timestamp.Sub(enginetest.Epoch).Milliseconds(), m.Headers))
				}
				return append(out, fmt.Sprint(d.Skipped()))
			}
			fused, generic := run(top), run(engine.Unfused(top))
			if !slices.Equal(fused, generic) {
				t.Errorf("fused:\n  %s\ngeneric:\n  %s", strings.Join(fused, "\n  "), strings.Join(generic, "\n  "))
			}
			if !slices.ContainsFunc(generic, func(s string) bool { return !strings.HasPrefix(s, "error:") && s != "map[]" }) {
				t.Errorf("no output to compare: %v", generic)
			}
		})
	}
}

func i64(v int64) []byte {
	b, err := serde.Int64.Encode(v)
	if err != nil {
		panic(err)
	}
	return b
}

// A count right after its source does not need the values: the source
// skips decoding them when decoding cannot fail (strings, bytes), and only
// then — an Int64 value of the wrong size is still a decode error, not a
// count.
func TestCountSkipsDecodingValues(t *testing.T) {
	build := func(vs serde.Serde[int64], strs bool) *engine.Topology {
		b := engine.NewBuilder()
		if strs {
			engine.NewStream(b, "in", serde.String, serde.String, engine.Named("src")).GroupByKey().Count().ToStream().To("out")
		} else {
			engine.NewStream(b, "in", serde.String, vs, engine.Named("src")).GroupByKey().Count().ToStream().To("out")
		}
		top, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		return top
	}
	strs := build(nil, true)
	if got := engine.UnreadValueSources(strs); len(got) != 1 || got[0] != "src" {
		t.Errorf("string values: sources skipping values %v, want [src]", got)
	}
	d := enginetest.New(t, strs)
	for i, v := range [][]byte{[]byte("x"), {}, []byte("\xff\xfe")} {
		if err := d.PipeBytes("in", []byte("k"), v, enginetest.At(int64(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.PipeBytes("in", []byte("k"), nil, enginetest.At(3)); err != nil { // a tombstone is not counted
		t.Fatal(err)
	}
	if got := enginetest.ReadTable(enginetest.NewOutput(d, "out", serde.String, serde.Int64)); got["k"] != 3 {
		t.Errorf("count %v, want k=3", got)
	}

	ints := build(serde.Int64, false)
	if got := engine.UnreadValueSources(ints); len(got) != 0 {
		t.Errorf("int64 values: sources skipping values %v, want none", got)
	}
	d = enginetest.New(t, ints)
	var se *serde.Error
	if err := d.PipeBytes("in", []byte("k"), []byte("abc"), enginetest.At(0)); !errors.As(err, &se) {
		t.Fatalf("a 3-byte Int64 value: %v, want a *serde.Error", err)
	}
	if got := enginetest.ReadTable(enginetest.NewOutput(d, "out", serde.String, serde.Int64)); len(got) != 0 {
		t.Errorf("a malformed value was counted: %v", got)
	}
}
