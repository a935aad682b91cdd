package postgres_test

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/cdc"
	"github.com/oxbow-dev/oxbow/cdc/postgres/pgtest"
	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/internal/await"
)

type customer struct {
	ID   int64  `json:"id"`
	Name string `json:"name"`
	Tier string `json:"tier"`
}

type product struct {
	SKU   string  `json:"sku"`
	Price float64 `json:"price"`
}

// From PostgreSQL to a table, for real: inserts, updates, deletes, a
// primary-key change and a truncate on two tables, captured by the source
// into three-partition topics, end in CDC-fed tables equal to the
// database's; and a stream joined with one is enriched with the current row.
func TestCDCFedTables(t *testing.T) {
	env := kafkaenv.Real(t)
	dsn := pgtest.Database(t)
	pgtest.Exec(t, dsn,
		`CREATE TABLE customers (id bigint PRIMARY KEY, name text NOT NULL, tier text NOT NULL DEFAULT 'basic')`,
		`CREATE TABLE products (sku text PRIMARY KEY, price numeric(10,2) NOT NULL)`,
		`INSERT INTO customers (id, name) SELECT i, 'c' || i FROM generate_series(1, 50) i`,
		`INSERT INTO products SELECT 'p' || i, i * 1.5 FROM generate_series(1, 20) i`)
	cfg := config(t, dsn, env, "customers", "products")
	// Prices as JSON numbers, for the rows' float64; truncates written.
	cfg.DecimalHandlingMode, cfg.SkippedOperations = "double", "none"
	cfg.Partitions = 3
	r := start(t, cfg)

	b := engine.NewBuilder()
	customers := cdc.NewTable(b, "customers", r.src.Topic("customers"), cdc.Column[int64]("id"), serde.Int64, serde.JSON[customer]())
	cdc.NewTable(b, "products", r.src.Topic("products"), cdc.Column[string]("sku"), serde.String, serde.JSON[product]())
	ordersTopic := cfg.TopicPrefix + ".orders"
	env.CreateTopics(t, 3, ordersTopic, cfg.TopicPrefix+".enriched")
	orders := engine.NewStream(b, ordersTopic, serde.Int64, serde.String)
	engine.Join(orders, customers, func(_ int64, o string, c customer) string { return o + " for " + c.Name + " (" + c.Tier + ")" }).To(cfg.TopicPrefix + ".enriched")
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	app := enginetest.StartApp(t, top, engine.Config{AppID: cfg.TopicPrefix, Brokers: env.Brokers, Guarantee: engine.ExactlyOnce})

	// The snapshot first, so that the changes are streamed.
	changes(t, env.Brokers, r.src.Topic("products"), 20)
	pgtest.Exec(t, dsn,
		`UPDATE customers SET tier = 'gold' WHERE id % 5 = 0`,
		`DELETE FROM customers WHERE id % 7 = 0`,
		`UPDATE customers SET id = id + 1000 WHERE id IN (3, 4)`, // primary-key changes
		`INSERT INTO customers (id, name) VALUES (51, 'new')`,
		`UPDATE customers SET name = 'renamed' WHERE id = 1003`,
		`UPDATE products SET price = price * 2 WHERE sku IN ('p1', 'p2')`,
		`DELETE FROM products WHERE sku = 'p3'`,
		`UPDATE products SET sku = 'p4x' WHERE sku = 'p4'`,
		`TRUNCATE products`,
		`INSERT INTO products VALUES ('q1', 9.99), ('q2', 19.99)`,
		`UPDATE products SET price = 10.50 WHERE sku = 'q1'`)

	wantCustomers := map[int64]customer{}
	rows := queryRows(t, dsn, `SELECT id, name, tier FROM customers`)
	for rows.Next() {
		var c customer
		if err := rows.Scan(&c.ID, &c.Name, &c.Tier); err != nil {
			t.Fatal(err)
		}
		wantCustomers[c.ID] = c
	}
	wantProducts := map[string]product{"q1": {"q1", 10.50}, "q2": {"q2", 19.99}}
	if len(wantCustomers) != 51-7+0 || wantCustomers[1003].Name != "renamed" {
		t.Fatalf("the database has %d customers: %v", len(wantCustomers), wantCustomers[1003])
	}
	await.Until(t, time.Minute, "customers", func() bool {
		return maps.Equal(tableContents(app, "customers", serde.Int64, serde.JSON[customer]()), wantCustomers)
	})
	await.Until(t, time.Minute, "products", func() bool {
		return maps.Equal(tableContents(app, "products", serde.String, serde.JSON[product]()), wantProducts)
	})

	// The stream joined with the table: the current rows.
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for _, id := range []int64{5, 7, 1003} {
		k, _ := serde.Int64.Encode(id)
		recs = append(recs, &kgo.Record{Topic: ordersTopic, Key: k, Value: []byte(fmt.Sprintf("order-%d", id))})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, rec := range changes(t, env.Brokers, cfg.TopicPrefix+".enriched", 2) {
		got[string(rec.Value)] = true
	}
	want := map[string]bool{"order-5 for c5 (gold)": true, "order-1003 for renamed (basic)": true}
	if !maps.Equal(got, want) {
		t.Errorf("enriched %v, want %v (7 was deleted)", got, want)
	}
}

func queryRows(t *testing.T, dsn, sql string) pgx.Rows {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	rows, err := conn.Query(ctx, sql)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rows.Close)
	return rows
}

func tableContents[K comparable, V any](app *engine.App, store string, ks serde.Serde[K], vs serde.Serde[V]) map[K]V {
	got := map[K]V{}
	st, err := engine.QueryKeyValueStore(app, store, ks, vs)
	if err != nil {
		return nil
	}
	for kv, err := range st.All() {
		if err != nil {
			return nil
		}
		got[kv.Key] = kv.Value
	}
	return got
}
