package cdc_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/cdc"
	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// The cost of a CDC-fed table, decoding Debezium events into rows keyed by
// the user's key, against its baseline, BenchmarkPlainTable: the same rows,
// already keyed and bare, into an ordinary table. Both on the test driver
// (one partition, no Kafka), so the ratio is the CPU the CDC layer adds:
//
//	go test -run '^$' -bench 'CDCTable|PlainTable' -benchmem ./cdc/
func BenchmarkCDCTable(b *testing.B) {
	bld := engine.NewBuilder()
	cdc.NewTable(bld, "customers", "pg.public.customers", cdc.Column[int64]("id"), serde.Int64, serde.JSON[customer]())
	top, err := bld.Build()
	if err != nil {
		b.Fatal(err)
	}
	d := enginetest.New(b, top)
	keys, values := benchEvents(1000)
	at := time.UnixMilli(1)
	b.ResetTimer()
	for i := range b.N {
		j := i % len(keys)
		if err := d.PipeBytes("pg.public.customers", keys[j], values[i%len(values)], at); err != nil {
			b.Fatal(err)
		}
		if j == len(keys)-1 {
			keys, values = benchEventsAfter(keys, values, int64(i+1))
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkPlainTable is BenchmarkCDCTable's baseline.
func BenchmarkPlainTable(b *testing.B) {
	bld := engine.NewBuilder()
	engine.NewTable(bld, "customers", serde.Int64, serde.JSON[customer](), engine.Materialized("customers"))
	top, err := bld.Build()
	if err != nil {
		b.Fatal(err)
	}
	d := enginetest.New(b, top)
	keys := make([][]byte, 1000)
	values := make([][]byte, 1000)
	for i := range keys {
		keys[i], _ = serde.Int64.Encode(int64(i))
		values[i] = []byte(fmt.Sprintf(`{"id":%d,"first_name":"name-%d","bio":"a customer of long standing, %d"}`, i, i, i))
	}
	at := time.UnixMilli(1)
	b.ResetTimer()
	for i := range b.N {
		if err := d.PipeBytes("customers", keys[i%len(keys)], values[i%len(values)], at); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// benchEvents are n update events of n keys, as the source writes them.
func benchEvents(n int) (keys, values [][]byte) {
	keys, values = make([][]byte, n), make([][]byte, n)
	for i := range n {
		keys[i] = []byte(fmt.Sprintf(`{"id":%d}`, i))
		values[i] = benchEvent(i, int64(i))
	}
	return keys, values
}

// benchEventsAfter gives the events positions after the last round's, so
// that none is passed over as a replay.
func benchEventsAfter(keys, values [][]byte, round int64) ([][]byte, [][]byte) {
	for i := range values {
		values[i] = benchEvent(i, round*int64(len(values))+int64(i))
	}
	return keys, values
}

func benchEvent(id int, lsn int64) []byte {
	return []byte(fmt.Sprintf(`{"before":null,"after":{"id":%d,"first_name":"name-%d","bio":"a customer of long standing, %d"},`+
		`"source":{"version":"oxbow","connector":"postgresql","name":"pg","ts_ms":1,"snapshot":"false","db":"shop","sequence":"[\"%d\",\"%d\"]",`+
		`"schema":"public","table":"customers","txId":%d,"lsn":%d,"commit_lsn":%d},"op":"u","ts_ms":2}`, id, id, id, lsn, lsn+1, lsn, lsn+1, lsn+2))
}
