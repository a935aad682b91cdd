package postgres_test

import (
	"context"
	"flag"
	"fmt"
	"strings"
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
// committed 1,000 rows to a transaction and for the initial snapshot; the
// same for Debezium's PostgreSQL connector, embedded (./debezium, its
// records written by a Java KafkaProducer with the source's settings:
// acks=all, idempotent, 5 ms linger, 1 MiB batches, snappy), on the same
// rows, the same database and broker; and, as the baseline, raw franz-go
// producing the same number of records of the same sizes with the same
// settings: what Kafka alone takes on this machine.
//
//	scripts/services.sh start && eval "$(scripts/services.sh env)"
//	go test -run '^$' -bench Source -benchtime 1x -count 5 ./cdc/postgres/
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
			r.awaitStreaming(b)
			conn, err := pgx.Connect(context.Background(), dsn)
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			begin := time.Now()
			insertOrders(b, conn, rows)
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
	b.Run("debezium-stream", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			dsn := pgtest.Database(b)
			pgtest.Exec(b, dsn, benchTable, fmt.Sprintf(benchInsert, 0, 0))
			d := startDebeziumProducing(b, dsn, env)
			// The snapshot's row acknowledged: Debezium streams.
			d.await(b, "its snapshot", func(d *debezium) bool { return d.acked >= 1 })
			conn, err := pgx.Connect(context.Background(), dsn)
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			begin := time.Now()
			insertOrders(b, conn, rows)
			d.await(b, "the changes acknowledged", func(d *debezium) bool { return d.acked >= int64(rows)+1 })
			el := time.Since(begin)
			b.StopTimer()
			b.ReportMetric(float64(rows)/el.Seconds(), "changes/s")
			d.stop(b)
			conn.Close(context.Background())
		}
	})
	b.Run("debezium-snapshot", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			dsn := pgtest.Database(b)
			pgtest.Exec(b, dsn, benchTable)
			for i := 0; i < rows; i += 10_000 {
				pgtest.Exec(b, dsn, fmt.Sprintf(benchInsert, i+1, min(i+10_000, rows)))
			}
			d := startDebeziumProducing(b, dsn, env)
			// From the task's start (its JVM's start is not counted): the
			// slot, the snapshot, every row acknowledged.
			d.await(b, "the task's start", func(d *debezium) bool { return d.ready })
			b.StartTimer()
			begin := time.Now()
			d.await(b, "the snapshot acknowledged", func(d *debezium) bool { return d.acked >= int64(rows) })
			el := time.Since(begin)
			b.StopTimer()
			b.ReportMetric(float64(rows)/el.Seconds(), "rows/s")
			d.stop(b)
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

// insertOrders commits rows orders, 1,000 to a transaction.
func insertOrders(b *testing.B, conn *pgx.Conn, rows int) {
	b.Helper()
	for i := 0; i < rows; i += 1000 {
		if _, err := conn.Exec(context.Background(), fmt.Sprintf(benchInsert, i+1, min(i+1000, rows))); err != nil {
			b.Fatal(err)
		}
	}
}

// startDebeziumProducing runs Debezium's connector on the orders table,
// writing to Kafka; it counts what Kafka acknowledged. Its queue and batch
// are larger than the defaults and its poll interval shorter, for
// throughput.
func startDebeziumProducing(b *testing.B, dsn string, env *kafkaenv.Env) *debezium {
	b.Helper()
	d := startDebezium(b)
	pc, err := pgx.ParseConfig(dsn)
	if err != nil {
		b.Fatal(err)
	}
	// The topic, as the source makes it (Kafka Connect would, by its
	// topic.creation settings).
	env.CreateTopics(b, 1, "dbzbench_"+pc.Database+".public.orders")
	d.run(b, dsn, map[string]string{
		"slot.name":                   pc.Database + "_dbz",
		"publication.name":            "dbz_pub",
		"publication.autocreate.mode": "filtered",
		"topic.prefix":                "dbzbench_" + pc.Database,
		"table.include.list":          "public.orders",
		"max.batch.size":              "8192",
		"max.queue.size":              "65536",
		"poll.interval.ms":            "5",

		"cdcdiff.produce.bootstrap.servers":  strings.Join(env.Brokers, ","),
		"cdcdiff.produce.acks":               "all",
		"cdcdiff.produce.enable.idempotence": "true",
		"cdcdiff.produce.linger.ms":          "5",
		"cdcdiff.produce.batch.size":         "1048576",
		"cdcdiff.produce.compression.type":   "snappy",
	})
	return d
}
