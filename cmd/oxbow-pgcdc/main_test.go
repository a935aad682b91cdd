package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/oxbow-dev/oxbow/cdc/postgres/pgtest"
	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
)

// No goroutine a test started outlives the tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Bad flags and configurations exit 2 and say why.
func TestBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-nope"}, "flag provided but not defined"},
		{[]string{"-dsn", "postgres://x/y", "-tables", "t", "-slot", "Bad-Slot", "-topic-prefix", "p", "-brokers", "b:9092"}, "Config.Slot"},
		{[]string{"-dsn", "postgres://x/y", "-slot", "s", "-topic-prefix", "p", "-brokers", "b:9092"}, "Config.Tables is empty"},
		{[]string{"-dsn", "postgres://x/y", "-tables", "t", "-slot", "s", "-topic-prefix", "p", "-brokers", "b:9092", "-decimal.handling.mode", "exact"}, "Config.DecimalHandlingMode \"exact\": want one of precise, double, string"},
		{[]string{"-dsn", "postgres://x/y", "-tables", "t", "-slot", "s", "-topic-prefix", "p", "-brokers", "b:9092", "-skipped.operations", "x"}, "Config.SkippedOperations"},
		{[]string{"-kafka-sasl-mechanism", "GSSAPI", "-kafka-sasl-user", "u"}, `unknown SASL mechanism "GSSAPI"`},
		{[]string{"-kafka-tls-cert", "client.pem"}, "both CertFile and KeyFile"},
	} {
		var stderr bytes.Buffer
		if code := run(context.Background(), c.args, &stderr); code != 2 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", c.args, code, stderr.String(), c.want)
		}
	}
}

// The command captures a table until it is told to stop, then exits 0.
func TestCaptures(t *testing.T) {
	env := kafkaenv.Real(t)
	dsn := pgtest.Database(t)
	pgtest.Exec(t, dsn, `CREATE TABLE t (id int PRIMARY KEY, v text, n numeric(4,2))`, `INSERT INTO t VALUES (1, 'a', 1.5)`)
	prefix := fmt.Sprintf("cmd%d", time.Now().UnixNano())
	ctx, cancel := context.WithCancel(context.Background())
	var stderr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"-dsn", dsn, "-tables", "t", "-slot", "cmd_" + prefix[len(prefix)-9:], "-topic-prefix", prefix,
			"-brokers", strings.Join(env.Brokers, ","), "-status-interval", "100ms", "-decimal.handling.mode", "double"}, &stderr)
	}()
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...), kgo.ConsumeTopics(prefix+".public.t"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	pctx, pcancel := context.WithTimeout(context.Background(), time.Minute)
	defer pcancel()
	var got, values []string
	inserted := false
	for len(got) < 2 {
		if pctx.Err() != nil {
			cancel()
			t.Fatalf("records %v after a minute\n%s", got, stderr.String())
		}
		cl.PollFetches(pctx).EachRecord(func(r *kgo.Record) { got, values = append(got, string(r.Key)), append(values, string(r.Value)) })
		if len(got) == 1 && !inserted {
			pgtest.Exec(t, dsn, `INSERT INTO t VALUES (2, 'b')`)
			inserted = true
		}
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("exit %d\n%s", code, stderr.String())
	}
	if got[0] != `{"id":1}` || got[1] != `{"id":2}` {
		t.Errorf("keys %v", got)
	}
	if !strings.Contains(values[0], `"n":1.5`) {
		t.Errorf("with -decimal.handling.mode double, the snapshot's row is %s, want n as 1.5", values[0])
	}
}

// Refused by the secured broker, the command exits 1 saying what was
// refused, and the password (given in the environment) is nowhere in what
// it prints.
func TestRefusedBySecuredKafka(t *testing.T) {
	s := kafkaenv.Secure(t)
	const wrong = "Wr0ng-Pa55word"
	t.Setenv("OXBOW_KAFKA_SASL_PASSWORD", wrong)
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"-dsn", pgtest.ServerDSN(t), "-tables", "t", "-slot", "refused", "-topic-prefix", "refused",
		"-brokers", s.SASL, "-kafka-tls-ca", s.Admin.CAFile, "-kafka-sasl-mechanism", "SCRAM-SHA-256", "-kafka-sasl-user", "oxbow-app"}, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "authentication failed") {
		t.Fatalf("exit %d, %s; want 1 and the authentication's failure", code, stderr.String())
	}
	if strings.Contains(stderr.String(), wrong) {
		t.Fatalf("the password is in the output: %s", stderr.String())
	}
}
