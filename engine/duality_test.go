package engine_test

import (
	"testing"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// The stream–table duality: a purchase history is a stream (every purchase is
// a fact), an employment history is a table (only the latest employer counts).
func TestStreamTableDuality(t *testing.T) {
	b := engine.NewBuilder()

	// Stream: Alice bought eggs (3), then milk (2): both are facts; the total is 5.
	purchases := engine.NewStream(b, "purchases", serde.String, serde.Int64)
	purchases.GroupByKey().Reduce(func(a, v int64) int64 { return a + v }, engine.Materialized("spent")).ToStream().To("spent")

	// Table: Alice worked at A (salary 10), then at B (salary 20): only B is current.
	jobs := engine.NewTable(b, "employment", serde.String, serde.JSON[job](), engine.Materialized("jobs"))
	engine.GroupTable(jobs, func(_ string, j job) (string, int64) { return "payroll", j.Salary }).
		Reduce(func(a, v int64) int64 { return a + v }, func(a, v int64) int64 { return a - v }, engine.Materialized("payroll")).
		ToStream().To("payroll")

	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	t.Log(top.Describe())
	d := enginetest.New(t, top)
	p := enginetest.NewInput(d, "purchases", serde.String, serde.Int64)
	p.Pipe("alice", 3, enginetest.At(1))
	p.Pipe("alice", 2, enginetest.At(2))
	e := enginetest.NewInput(d, "employment", serde.String, serde.JSON[job]())
	e.Pipe("alice", job{"A", 10}, enginetest.At(1))
	e.Pipe("alice", job{"B", 20}, enginetest.At(2))

	spent := enginetest.StoreContents(d, "spent", serde.String, serde.Int64)
	if spent["alice"] != 5 {
		t.Errorf("stream sum = %d, want 5 (both purchases count)", spent["alice"])
	}
	payroll := enginetest.StoreContents(d, "payroll", serde.String, serde.Int64)
	if payroll["payroll"] != 20 {
		t.Errorf("table sum = %d, want 20 (only the current job counts)", payroll["payroll"])
	}
	out := enginetest.NewOutput(d, "payroll", serde.String, serde.Int64)
	t.Log(out.ReadKeyValues())
}

type job struct {
	Company string
	Salary  int64
}
