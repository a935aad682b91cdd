package postgres_test

import (
	"context"
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/cdc/postgres/pgtest"
	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
)

var benchRows = flag.Int("oxbow.cdc.rows", 100_000, "row changes per iteration of the source benchmarks")

// BenchmarkSource measures the source's throughput, row changes per second
// from PostgreSQL into Kafka (acknowledged by Kafka), for streamed inserts
// committed 1,000 rows to a transaction and for the initial snapshot; and,
// as the baseline, raw franz-go producing the same number of records of
// the same sizes with the same settings (acks=all, idempotent, 5ms linger):
// what Kafka alone takes on this machine.
//
//	scripts/services.sh start && eval "$(scripts/services.sh env)"
//	go test -run '^$' -bench Source -benchtime 1x -count 3 ./cdc/postgres/
func BenchmarkSource(b *testing.B) {
	env := kafkaenv.Real(b)
	rows := *benchRows
	var size, keySize int
	b.Run("stream", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			dsn := pgtest.Database(b)
			pgtest.Exec(b, dsn, benchTable)
			r := start(b, config(b, dsn, env, "orders"))
			waitStreaming(b, r)
			conn, err := pgx.Connect(context.Background(), dsn)
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			begin := time.Now()
			for i := 0; i < rows; i += 1000 {
				if _, err := conn.Exec(context.Background(), fmt.Sprintf(benchInsert, i+1, min(i+1000, rows))); err != nil {
					b.Fatal(err)
				}
			}
			for r.src.Stats().Changes < int64(rows) {
				time.Sleep(time.Millisecond)
			}
			el := time.Since(begin)
			b.StopTimer()
			b.ReportMetric(float64(rows)/el.Seconds(), "changes/s")
			recs := changes(b, env.Brokers, r.src.Topic("orders"), 1)
			size, keySize = len(recs[0].Value), len(recs[0].Key)
			r.close(b)
			conn.Close(context.Background())
		}
	})
	b.Run("snapshot", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			dsn := pgtest.Database(b)
			pgtest.Exec(b, dsn, benchTable)
			for i := 0; i < rows; i += 10_000 {
				pgtest.Exec(b, dsn, fmt.Sprintf(benchInsert, i+1, min(i+10_000, rows)))
			}
			b.StartTimer()
			begin := time.Now()
			r := start(b, config(b, dsn, env, "orders"))
			for r.src.Stats().SnapshotRows < int64(rows) {
				time.Sleep(time.Millisecond)
			}
			el := time.Since(begin)
			b.StopTimer()
			b.ReportMetric(float64(rows)/el.Seconds(), "rows/s")
			r.close(b)
		}
	})
	b.Run("kafka-baseline", func(b *testing.B) {
		if size == 0 {
			b.Skip("needs the stream benchmark's record sizes")
		}
		for range b.N {
			b.StopTimer()
			topic := fmt.Sprintf("cdcbench%d", time.Now().UnixNano())
			env.CreateTopics(b, 1, topic)
			cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...), kgo.DefaultProduceTopic(topic),
				kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(5*time.Millisecond))
			if err != nil {
				b.Fatal(err)
			}
			value, key := make([]byte, size), make([]byte, keySize)
			b.StartTimer()
			begin := time.Now()
			for range rows {
				cl.Produce(context.Background(), &kgo.Record{Key: key, Value: value}, nil)
			}
			if err := cl.Flush(context.Background()); err != nil {
				b.Fatal(err)
			}
			el := time.Since(begin)
			b.StopTimer()
			b.ReportMetric(float64(rows)/el.Seconds(), "records/s")
			cl.Close()
		}
	})
}

const (
	benchTable  = `CREATE TABLE orders (id bigint PRIMARY KEY, customer bigint NOT NULL, sku text NOT NULL, amount numeric(10,2) NOT NULL, placed timestamptz NOT NULL DEFAULT now())`
	benchInsert = `INSERT INTO orders (id, customer, sku, amount) SELECT i, i %% 1000, 'sku-' || (i %% 500), (i %% 10000) / 100.0 FROM generate_series(%d, %d) i`
)

// waitStreaming waits for the source to be past its snapshot.
func waitStreaming(b *testing.B, r *running) {
	b.Helper()
	deadline := time.Now().Add(time.Minute)
	for r.src.Stats().Acknowledged == 0 {
		if time.Now().After(deadline) {
			b.Fatal("the source is not streaming after a minute")
		}
		time.Sleep(time.Millisecond)
	}
}
