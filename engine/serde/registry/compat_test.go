package registry_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/engine/serde/registry"
	"github.com/oxbow-dev/oxbow/engine/serde/registry/internal/testpb"
	"github.com/oxbow-dev/oxbow/internal/srtest"
)

// Evolution under the subject's compatibility rule, BACKWARD (as
// scripts/services.sh sets the registry, Confluent's default), on the real
// registry: the fake takes every schema as compatible.
func TestEvolutionUnderBackwardCompatibility(t *testing.T) {
	ctx := context.Background()
	e := &env{srtest.Real(t), t}
	for _, res := range e.Client.Compatibility(ctx) {
		if res.Err != nil || res.Level != sr.CompatBackward {
			t.Fatalf("the registry's global compatibility: %v, %v; want BACKWARD", res.Level, res.Err)
		}
	}
	r := newRegistry(t, e.URL)
	topic := e.topic("shoes")
	if _, err := registry.Avro[shoeV1T](ctx, r, topic, shoeV1, registry.AutoRegister()); err != nil {
		t.Fatal(err)
	}
	// A new field with a default: readers of v2 read v1's records.
	if _, err := registry.Avro[shoeV2T](ctx, r, topic, shoeV2, registry.AutoRegister()); err != nil {
		t.Fatalf("v2 (a field with a default) refused: %v", err)
	}
	// A new field without one: v3's readers could not read v2's records.
	v3 := strings.Replace(shoeV2, `{"name":"colour","type":"string","default":"black"}`, `{"name":"colour","type":"string","default":"black"},{"name":"width","type":"int"}`, 1)
	type shoeV3T struct {
		shoeV2T
		Width int `avro:"width"`
	}
	_, err := registry.Avro[shoeV3T](ctx, r, topic, v3, registry.AutoRegister())
	if err == nil || errors.Is(err, serde.ErrUnavailable) || !strings.Contains(err.Error(), "registering the schema under") {
		t.Fatalf("v3 (a field without a default): %v, want the registry's refusal", err)
	}
	t.Logf("v3 refused: %v", err)
	versions, err := e.Client.SubjectVersions(ctx, topic+"-value")
	if err != nil || len(versions) != 2 {
		t.Errorf("versions %v, %v; want v1 and v2 only", versions, err)
	}

	// Protobuf: a field whose type changes is refused.
	orders := e.topic("pb-shoes")
	shoe, err := registry.Protobuf[*testpb.Shoe](ctx, r, orders, registry.AutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	first := e.schemaAt(orders+"-value", 1)
	changed := strings.Replace(first.Schema.Schema, "int64 price = 2;", "string price = 2;", 1)
	if changed == first.Schema.Schema {
		t.Fatalf("the registered schema has no price field to change:\n%s", first.Schema.Schema)
	}
	if _, err := e.Client.RegisterSchema(ctx, orders+"-value", sr.Schema{Type: sr.TypeProtobuf, Schema: changed}, -1, -1); err == nil {
		t.Error("the registry took a Protobuf field whose type changed")
	}
	added := strings.Replace(first.Schema.Schema, "int64 price = 2;", "int64 price = 2;\n  string brand = 9;", 1)
	if _, err := e.Client.RegisterSchema(ctx, orders+"-value", sr.Schema{Type: sr.TypeProtobuf, Schema: added}, -1, -1); err != nil {
		t.Errorf("the registry refused a Protobuf field added: %v", err)
	}
	if b, err := shoe.Encode(&testpb.Shoe{Sku: "x"}); err != nil {
		t.Error(err)
	} else if _, err := shoe.Decode(b); err != nil {
		t.Error(err)
	}
}

// Instances starting at once register the same schemas at once: each gets
// the id. Apicurio answers the loser of the race 409, at times before the
// winner's schema can be looked up; the serde then tries again. Rounds of
// subjects raced in pairs (as two services register the commands they
// share) are what made the early 409 show, in about half of the rounds.
func TestConcurrentRegistration(t *testing.T) {
	e := newEnv(t)
	const rounds, subjects, racers = 10, 6, 2
	type result struct {
		subject, id int
		err         error
	}
	for round := range rounds {
		results := make(chan result, subjects*racers)
		for sub := range subjects {
			topic := e.topic(fmt.Sprintf("race%d-%d", round, sub))
			for range racers {
				go func() {
					s, err := registry.Avro[shoeV1T](context.Background(), newRegistry(t, e.URL), topic, shoeV1, registry.AutoRegister())
					if err != nil {
						results <- result{err: err}
						return
					}
					b, err := s.Encode(shoeV1T{SKU: "x"})
					if err != nil {
						results <- result{err: err}
						return
					}
					results <- result{sub, int(b[1])<<24 | int(b[2])<<16 | int(b[3])<<8 | int(b[4]), nil}
				}()
			}
		}
		ids := map[int]int{}
		for range subjects * racers {
			r := <-results
			switch first, ok := ids[r.subject]; {
			case r.err != nil:
				t.Errorf("round %d: a registration failed: %v", round, r.err)
			case ok && first != r.id:
				t.Errorf("round %d: ids %d and %d for one schema", round, first, r.id)
			default:
				ids[r.subject] = r.id
			}
		}
		if t.Failed() {
			return
		}
	}
}
