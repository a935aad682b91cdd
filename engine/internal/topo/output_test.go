package topo

import (
	"slices"
	"strings"
	"testing"
)

// Targets: each partition once, in the order first given, by a short list
// or, past 16, a bitset; none means by the key; a partition outside the
// topic is an error naming it.
func TestOutputTargets(t *testing.T) {
	many := []int{}
	for p := range 40 {
		many = append(many, 39-p, 39-p)
	}
	manyWant := []int32{}
	for p := range int32(40) {
		manyWant = append(manyWant, 39-p)
	}
	cases := []struct {
		name string
		fn   func(n int) []int // nil: no Partitions
		n    int32
		want []int32
		err  string
	}{
		{"no function", nil, 3, nil, ""},
		{"none chosen", func(int) []int { return nil }, 3, nil, ""},
		{"empty", func(int) []int { return []int{} }, 3, nil, ""},
		{"one", func(int) []int { return []int{2} }, 3, []int32{2}, ""},
		{"duplicates", func(int) []int { return []int{1, 0, 1, 2, 0} }, 3, []int32{1, 0, 2}, ""},
		{"many with duplicates", func(int) []int { return many }, 40, manyWant, ""},
		{"the count", func(n int) []int { return []int{n} }, 3, nil, "partition 3, not in [0, 3)"},
		{"negative", func(int) []int { return []int{0, -1} }, 3, nil, "partition -1, not in [0, 3)"},
		{"outside among many", func(n int) []int { return append(slices.Clone(many), n) }, 40, nil, "partition 40, not in [0, 40)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := Output{Topic: "app-t-repartition", Partition: AnyPartition, Partitions: c.fn}
			got, err := o.Targets(c.n)
			switch {
			case c.err == "" && err != nil:
				t.Fatalf("error %v", err)
			case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), "app-t-repartition")):
				t.Fatalf("error %v, want one naming the topic and saying %q", err, c.err)
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("targets %v, want %v", got, c.want)
			}
		})
	}
}
