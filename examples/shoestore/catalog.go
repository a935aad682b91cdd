package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/cdc/postgres"
	"github.com/oxbow-dev/oxbow/engine/kafkasec"
)

// The catalog the store starts with, when the table is empty (or there is
// no database).
var seedCatalog = []CatalogItem{
	{Model: "red", Name: "Red Oxford", PriceCents: 6000},
	{Model: "blue", Name: "Blue Derby", PriceCents: 5500},
	{Model: "green", Name: "Green Loafer", PriceCents: 7000},
}

// catalogSource feeds the catalog topic: captured from PostgreSQL when
// the store has a database, or seeded by the store itself.
type catalogSource struct {
	src  *postgres.Source // nil: seeded
	done chan error
}

// startCatalog makes sure the catalog topic will have the catalog. With a
// DSN, the table public.catalog is created (and seeded) if missing, and a
// logical-replication source captures it in the background until ctx is
// done; without, Debezium-shaped events of the seed catalog are written to
// the topic, once.
func startCatalog(ctx context.Context, cfg config, log *slog.Logger) (*catalogSource, error) {
	name, dsn := cfg.Name, cfg.PGDSN
	if dsn == "" {
		if err := seedTopic(ctx, cfg, catalogTopic(name)); err != nil {
			return nil, err
		}
		log.Info("shoestore: no PostgreSQL (set -pg or OXBOW_PG_DSN): the catalog comes from a topic the store seeded itself", "topic", catalogTopic(name))
		return &catalogSource{}, nil
	}
	pc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("shoestore: the catalog database: %w", err)
	}
	if cfg.PGPasswordFile != "" {
		pw, err := kafkasec.ReadSecret(cfg.PGPasswordFile)
		if err != nil {
			return nil, fmt.Errorf("shoestore: the catalog database: %w", err)
		}
		pc.Password = pw.Reveal()
	}
	conn, err := pgx.ConnectConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("shoestore: the catalog database: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS catalog (model text PRIMARY KEY, name text NOT NULL, price_cents bigint NOT NULL)`); err != nil {
		return nil, fmt.Errorf("shoestore: the catalog table: %w", err)
	}
	for _, c := range seedCatalog {
		if _, err := conn.Exec(ctx, `INSERT INTO catalog VALUES ($1, $2, $3) ON CONFLICT (model) DO NOTHING`, c.Model, c.Name, c.PriceCents); err != nil {
			return nil, fmt.Errorf("shoestore: seeding the catalog: %w", err)
		}
	}
	src, err := postgres.New(postgres.Config{DSN: dsn, PasswordFile: cfg.PGPasswordFile, Tables: []string{"public.catalog"}, Slot: slotName(name),
		TopicPrefix: name, Brokers: cfg.Brokers, KafkaSecurity: cfg.Kafka, Partitions: partitions, StatusInterval: time.Second, Logger: cfg.EngineLogger})
	if err != nil {
		return nil, err
	}
	cs := &catalogSource{src: src, done: make(chan error, 1)}
	go func() { cs.done <- src.Run(ctx) }()
	log.Info("shoestore: capturing the catalog from PostgreSQL", "table", "public.catalog", "topic", catalogTopic(name))
	return cs, nil
}

// wait waits for the capture to stop (after ctx is done) and closes it.
func (c *catalogSource) wait() error {
	if c.src == nil {
		return nil
	}
	err := <-c.done
	c.src.Close()
	return err
}

// seedTopic writes the seed catalog as Debezium snapshot events, unless
// the topic has records already.
func seedTopic(ctx context.Context, cfg config, topic string) error {
	opts, err := cfg.Kafka.ClientOpts(cfg.Brokers, kgo.DefaultProduceTopic(topic))
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	if n, err := topicRecords(ctx, cl, topic); err != nil || n > 0 {
		return err
	}
	var recs []*kgo.Record
	for i, c := range seedCatalog {
		key, _ := json.Marshal(map[string]string{"model": c.Model})
		after, _ := json.Marshal(c)
		value := fmt.Sprintf(`{"before":null,"after":%s,"source":{"connector":"postgresql","name":"shoestore","schema":"public","table":"catalog","snapshot":"true","lsn":%d,"commit_lsn":0},"op":"r","ts_ms":%d}`,
			after, i+1, time.Now().UnixMilli())
		recs = append(recs, &kgo.Record{Key: key, Value: []byte(value)})
	}
	return cl.ProduceSync(ctx, recs...).FirstErr()
}

// slotName is the replication slot of a store's catalog capture.
func slotName(name string) string {
	b := []byte(strings.ToLower(name) + "_catalog")
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}
