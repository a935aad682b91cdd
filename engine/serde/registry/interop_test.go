package registry_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/engine/serde/registry"
	"github.com/oxbow-dev/oxbow/internal/javabuild"
	"github.com/oxbow-dev/oxbow/internal/srtest"
)

// The Java program's shoe with a field it does not have: Oxbow reads its
// records with a later version of their schema.
const shoeGo = `{"type":"record","name":"Shoe","namespace":"shop","fields":[
	{"name":"sku","type":"string"},
	{"name":"price","type":"long"},
	{"name":"colour","type":"string","default":"black"},
	{"name":"discount","type":"int","default":0}]}`

type shoeGoT struct {
	SKU      string `avro:"sku" json:"sku"`
	Price    int64  `avro:"price" json:"price"`
	Colour   string `avro:"colour" json:"colour"`
	Discount int    `avro:"discount" json:"discount"`
}

// javaInterop builds internal/javainterop with Maven, or skips the test
// without java and mvn (fails under CI).
func javaInterop(t *testing.T) func(args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	classpath := javabuild.ForTest(t, ctx, "engine/serde/registry/internal/javainterop")
	return func(args ...string) []byte {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "java", append([]string{"-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", classpath, "dev.oxbow.interop.Main"}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("java %s: %v\n%s", args[0], err, stderr.Bytes())
		}
		return out
	}
}

// A Java producer with Apicurio's Avro serde (Confluent's id handling)
// writes a topic; Oxbow reads it with a later version of the schema and
// writes its own; the Java consumer reads that back.
func TestJavaAvroInterop(t *testing.T) {
	reg := srtest.Real(t)
	java := javaInterop(t)
	kenv := kafkaenv.ForTest(t)
	in, out := reg.Prefix+"-in", reg.Prefix+"-out"
	kenv.CreateTopics(t, 3, in, out)
	brokers := strings.Join(kenv.Brokers, ",")
	const n = 120
	java("produce", brokers, reg.Base, in, fmt.Sprint(n))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := newRegistry(t, reg.URL)
	reader, err := registry.Avro[shoeGoT](ctx, r, in, shoeGo, registry.AutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	writer, err := registry.Avro[shoeGoT](ctx, r, out, shoeGo, registry.AutoRegister())
	if err != nil {
		t.Fatal(err)
	}
	b := engine.NewBuilder()
	engine.MapValues(engine.NewStream(b, in, serde.String, reader), func(_ string, s shoeGoT) shoeGoT {
		s.Price *= 2
		s.Discount = len(s.Colour)
		return s
	}).WithSerdes(serde.String, writer).To(out)
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	app, err := engine.NewApp(top, engine.Config{AppID: reg.Prefix + "-app", Brokers: kenv.Brokers, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	got := map[string]shoeGoT{}
	sc := bufio.NewScanner(bytes.NewReader(java("consume", brokers, reg.Base, out, fmt.Sprint(n))))
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), "\t")
		var s shoeGoT
		if !ok || json.Unmarshal([]byte(value), &s) != nil {
			t.Fatalf("the Java consumer printed %q", sc.Text())
		}
		got[key] = s
	}
	colours := []string{"black", "tan", "red"}
	for i := range n {
		c := colours[i%3]
		want := shoeGoT{SKU: fmt.Sprintf("sku-%d", i), Price: 200 * int64(i), Colour: c, Discount: len(c)}
		if g := got[fmt.Sprintf("k%d", i)]; g != want {
			t.Errorf("k%d: Java read %+v, want %+v", i, g, want)
		}
	}
	if len(got) != n {
		t.Errorf("Java read %d keys, want %d", len(got), n)
	}
}
