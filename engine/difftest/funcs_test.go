package difftest

import (
	"strconv"

	"github.com/oxbow-dev/oxbow/engine"
)

// The catalog's user functions: the same as the static methods of
// kstreams/src/main/java/dev/oxbow/difftest/Twins.java, one for one. Values
// are small decimal numbers; the functions build strings from them that keep
// the order they were called in, so that a result shows how it was made.

// n is the number a value stands for; 0 when it is none.
func n(v string) int {
	i, err := strconv.Atoi(v)
	if err != nil {
		return 0
	}
	return i
}

func even(_, v string) bool  { return n(v)%2 == 0 }
func three(_, v string) bool { return n(v)%3 == 0 }

// firstEven: v starts with an even digit (a join's result whose left value is even).
func firstEven(_, v string) bool { return v != "" && v[0] >= '0' && v[0] <= '9' && (v[0]-'0')%2 == 0 }

func mapValue(_, v string) string { return "m" + v }

func newKey(_, v string) string { return "k" + strconv.Itoa(n(v)%3) }

func mapPair(k, v string) (string, string) { return newKey(k, v), k + v }

func fanValues(_, v string) []string {
	if n(v)%3 == 0 {
		return nil
	}
	return []string{"a" + v, "b" + v}
}

func fanPairs(k, v string) []engine.KeyValue[string, string] {
	if n(v)%3 == 0 {
		return nil
	}
	return []engine.KeyValue[string, string]{engine.KV(k, "a"+v), engine.KV("k"+strconv.Itoa(n(v)%2), "b"+v)}
}

func initial() string { return "i" }

func reduce(agg, v string) string { return agg + "+" + v }

func aggregate(_, v, agg string) string { return agg + "," + v }

func aggregate2(_, v, agg string) string { return agg + "*" + v }

func subtract(agg, v string) string { return agg + "-" + v }

func merge(_, a, b string) string { return a + "|" + b }

func regroup(k, v string) (string, string) { return "g" + strconv.Itoa(n(v)%2), k + v }

// joined is the joiner of every join: each side's value, "-" for a side not found.
func joined(l string, lok bool, r string, rok bool) string {
	if !lok {
		l = "-"
	}
	if !rok {
		r = "-"
	}
	return l + "/" + r
}

func foreignKey(v string) string { return "f" + strconv.Itoa(n(v)%3) }
