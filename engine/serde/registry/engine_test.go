package registry_test

import (
	"context"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/engine/serde/registry"
	"github.com/oxbow-dev/oxbow/internal/await"
)

// In an application: records that cannot be read are dead-lettered with
// the reason; a record whose schema must be fetched while the registry is
// down waits for it, and is processed once it is back, not dead-lettered.
func TestInAnApplication(t *testing.T) {
	e := newEnv(t)
	kenv := kafkaenv.ForTest(t)
	in, out, dlq := e.topic("in"), e.topic("out"), e.topic("dlq")
	kenv.CreateTopics(t, 1, in, out, dlq)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := newRegistry(t, e.URL)
	shoes, err := registry.Avro[shoeV1T](ctx, r, in, shoeV1, registry.AutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	b := engine.NewBuilder()
	engine.MapValues(engine.NewStream(b, in, serde.String, shoes), func(_ string, s shoeV1T) string { return s.SKU }).
		WithSerdes(serde.String, serde.String).To(out)
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(kenv.Brokers...), kgo.DefaultProduceTopic(in))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	produce := func(key string, value []byte) {
		t.Helper()
		if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte(key), Value: value}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	good := must(shoes.Encode(shoeV1T{SKU: "derby", Price: 100}))
	withID := func(id int, payload []byte) []byte {
		return append(binary.BigEndian.AppendUint32([]byte{0}, uint32(id)), payload...)
	}
	produce("good", good)
	produce("json", []byte(`{"sku":"derby","price":100}`))
	produce("unknown", withID(unknownID, good[5:]))
	produce("short", good[:len(good)-1])

	app, err := engine.NewApp(top, engine.Config{AppID: e.Prefix + "-app", Brokers: kenv.Brokers, StateDir: t.TempDir(),
		OnDeserializationError: engine.DeadLetter, DeadLetterTopic: dlq})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()

	dead := read(t, kenv, dlq, 3)
	for _, want := range []struct{ key, says string }{
		{"json", "not in Confluent's wire format"},
		{"unknown", "unknown schema id"},
		{"short", "payload does not match its schema"},
	} {
		rec, ok := dead[want.key]
		if !ok {
			t.Errorf("%s: not dead-lettered", want.key)
			continue
		}
		if h := header(rec, engine.HeaderError); !strings.Contains(h, want.says) {
			t.Errorf("%s: dead-lettered saying %q, want %q", want.key, h, want.says)
		}
	}

	// A record of a schema the application has not seen, while the
	// registry is down.
	e.Down(true)
	v2 := e.register(in+"-value", sr.Schema{Type: sr.TypeAvro, Schema: shoeV2})
	produce("while-down", withID(v2, append(append([]byte{}, good[5:]...), 6, 'g', 'r', 'e', 'e', 'n')))
	start := e.Refused()
	await.Until(t, time.Minute, "the application retrying the registry", func() bool { return len(done) > 0 || e.Refused() >= start+2 })
	if len(done) > 0 {
		t.Fatalf("Run returned %v while the registry was down", <-done)
	}
	e.Down(false)
	outs := read(t, kenv, out, 2)
	if v := outs["while-down"]; v == nil || string(v.Value) != "derby" {
		t.Errorf("the record read while the registry was down: %v", v)
	}
	if v := outs["good"]; v == nil || string(v.Value) != "derby" {
		t.Errorf("the good record: %v", v)
	}
	if n := len(read(t, kenv, dlq, 3)); n != 3 {
		t.Errorf("%d dead letters, want the 3", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// read reads a topic from the start until it has n records, by key.
func read(t *testing.T, kenv *kafkaenv.Env, topic string, n int) map[string]*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kenv.Brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got := map[string]*kgo.Record{}
	var count int
	for count < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%s: %d records of %d after a minute", topic, count, n)
		}
		fs.EachRecord(func(r *kgo.Record) {
			got[string(r.Key)] = r
			count++
		})
	}
	return got
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}
