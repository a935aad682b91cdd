package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/httpapi"
	"github.com/oxbow-dev/oxbow/internal/await"
	"github.com/oxbow-dev/oxbow/projection"
)

// kvTable creates a topic of its own with partitions partitions on the
// test's broker and a topology that keeps it in the table "kv" (string
// keys, int64 values); cl produces to the topic. The topic's name will do
// as the application's id.
func kvTable(t testing.TB, name string, partitions int32) (env *kafkaenv.Env, topic string, top *engine.Topology, cl *kgo.Client) {
	t.Helper()
	env = kafkaenv.ForTest(t)
	topic = fmt.Sprintf("%s-%d", name, time.Now().UnixNano())
	env.CreateTopics(t, partitions, topic)
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	b := engine.NewBuilder()
	engine.NewTable(b, topic, serde.String, serde.Int64, engine.Materialized("kv"))
	if top, err = b.Build(); err != nil {
		t.Fatal(err)
	}
	return env, topic, top, cl
}

// sse reads server-sent events.
type sse struct {
	resp *http.Response
	sc   *bufio.Scanner
}

func openFeed(t *testing.T, url, lastID string) *sse {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("feed: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	t.Cleanup(func() { resp.Body.Close() })
	return &sse{resp: resp, sc: bufio.NewScanner(resp.Body)}
}

// next returns the next event's type, id and data (comments skipped); ok
// false at the end of the stream.
func (s *sse) next() (event, id, data string, ok bool) {
	for s.sc.Scan() {
		line := s.sc.Text()
		switch {
		case line == "":
			if event != "" || data != "" {
				return event, id, data, true
			}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "event: "):
			event = line[len("event: "):]
		case strings.HasPrefix(line, "id: "):
			id = line[len("id: "):]
		case strings.HasPrefix(line, "data: "):
			data = line[len("data: "):]
		}
	}
	return "", "", "", false
}

// A view's change feed: every change, or one key's, in order; a client
// that reconnects with the last event's id gets what followed; Close ends
// the feeds.
func TestChangeFeed(t *testing.T) {
	env, topic, top, cl := kvTable(t, "http-feed", 3)
	ctx := context.Background()
	a := enginetest.StartApp(t, top, engine.Config{AppID: topic, Brokers: env.Brokers})
	view, _ := projection.NewKeyValue("kv", "kv", serde.String, serde.Int64)
	views, _ := projection.NewRegistry(view)
	h, err := httpapi.New(httpapi.Config{Instance: a, Views: views, Brokers: env.Brokers, Heartbeat: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(h)
	defer s.Close()

	all := openFeed(t, s.URL+"/views/kv/changes", "")
	one := openFeed(t, s.URL+"/views/kv/changes?key=b", "")
	put := func(k string, v int64, del bool) {
		t.Helper()
		r := &kgo.Record{Key: []byte(k)}
		if !del {
			r.Value, _ = serde.Int64.Encode(v)
		}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	// Each change, once it is committed (the record cache would merge
	// changes committed together into the latest, as Kafka Streams' does).
	var ids []string
	for _, c := range []struct {
		k    string
		v    int64
		del  bool
		want string
	}{
		{"a", 1, false, `{"key":"a","value":1}`},
		{"b", 2, false, `{"key":"b","value":2}`},
		{"a", 3, false, `{"key":"a","value":3}`},
		{"b", 0, true, `{"key":"b","deleted":true}`},
	} {
		put(c.k, c.v, c.del)
		ev, id, data, ok := all.next()
		if !ok || ev != "change" || data != c.want {
			t.Fatalf("the feed: %q %q %v, want %s", ev, data, ok, c.want)
		}
		ids = append(ids, id)
	}
	for _, want := range []string{`{"key":"b","value":2}`, `{"key":"b","deleted":true}`} {
		if _, _, data, ok := one.next(); !ok || data != want {
			t.Errorf("the feed of b: %s, want %s", data, want)
		}
	}
	// Resume after the first event: the three that followed.
	again := openFeed(t, s.URL+"/views/kv/changes", ids[0])
	var resumed []string
	for len(resumed) < 3 {
		_, _, data, ok := again.next()
		if !ok {
			t.Fatal("the resumed feed ended")
		}
		resumed = append(resumed, data)
	}
	// In order per key (keys in different partitions may interleave).
	byKey := map[string][]string{}
	for _, d := range resumed {
		k := strings.Split(d, `"`)[3]
		byKey[k] = append(byKey[k], d)
	}
	if fmt.Sprint(byKey["a"]) != `[{"key":"a","value":3}]` || fmt.Sprint(byKey["b"]) != `[{"key":"b","value":2} {"key":"b","deleted":true}]` {
		t.Errorf("resumed after the first change: %v", resumed)
	}
	// A resume point the feed cannot honour is a 400 saying why, never a
	// feed that loses changes: an offset past the end, a partition the
	// changelog lacks, a partition left out.
	last := ids[len(ids)-1] // "0:x,1:y,2:z"
	parts := strings.Split(last, ",")
	for _, c := range []struct{ id, why string }{
		{strings.Replace(last, parts[0], strings.Split(parts[0], ":")[0]+":999999", 1), "past the changelog's end"},
		{last + ",7:0", "no partition 7"},
		{parts[0], "no offset for partition 1, 2"},
		{"0:x", "want <partition>:<offset>"},
	} {
		req, _ := http.NewRequest(http.MethodGet, s.URL+"/views/kv/changes", nil)
		req.Header.Set("Last-Event-ID", c.id)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(b), c.why) {
			t.Errorf("resume from %q: %d %s, want 400 saying %q", c.id, resp.StatusCode, b, c.why)
		}
	}
	// The status says how far behind its inputs the instance is: nothing
	// left once every change is out.
	// (Partitions without records have no position, so no lag.)
	await.NoError(t, 10*time.Second, "no lag in /status", func() error {
		status, _, body := get(t, s, "/status")
		var st httpapi.Status
		_ = json.Unmarshal([]byte(body), &st)
		lagged := 0
		for _, l := range st.Lag[topic] {
			lagged += int(l)
		}
		if status == 200 && len(st.Lag[topic]) == len(st.Position[topic]) && len(st.Lag[topic]) > 0 && lagged == 0 {
			return nil
		}
		return fmt.Errorf("/status: %d %s, want no lag of %s", status, body, topic)
	})
	// Close ends the feeds; a new one is refused.
	h.Close()
	if _, _, _, ok := all.next(); ok {
		for {
			if _, _, _, ok := all.next(); !ok {
				break
			}
		}
	}
	resp, err := http.Get(s.URL + "/views/kv/changes")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a feed after Close: %d", resp.StatusCode)
	}
}

// The change feed of a count-windowed view: its keys decoded as windows,
// and ?key= gives every window of that key and no other key's, not even
// one whose key begins the same.
func TestWindowedChangeFeed(t *testing.T) {
	env := kafkaenv.ForTest(t)
	topic := fmt.Sprintf("http-wfeed-%d", time.Now().UnixNano())
	env.CreateTopics(t, 1, topic)
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	b := engine.NewBuilder()
	engine.CountWindowedCount(engine.NewStream(b, topic, serde.String, serde.String).GroupByKey().
		WindowedByCount(engine.TumblingCountWindows(2)), engine.Materialized("counts"))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	a := enginetest.StartApp(t, top, engine.Config{AppID: topic, Brokers: env.Brokers})
	view, _ := projection.NewCountWindowed("counts", "counts", serde.String, serde.Int64, 2)
	views, _ := projection.NewRegistry(view)
	h, err := httpapi.New(httpapi.Config{Instance: a, Views: views, Brokers: env.Brokers, Heartbeat: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(h)
	defer s.Close()
	defer h.Close() // first: it ends the feed, which the server's Close awaits

	feed := openFeed(t, s.URL+"/views/counts/changes?key=a", "")
	// Each record committed before the next, so that every change is in
	// the changelog (the cache would merge those committed together).
	for _, k := range []string{"a", "ab", "a", "ab", "a"} {
		rec, err := cl.ProduceSync(context.Background(), &kgo.Record{Key: []byte(k), Value: []byte("x")}).First()
		if err != nil {
			t.Fatal(err)
		}
		await.Until(t, 30*time.Second, fmt.Sprintf("the record at %d committed", rec.Offset), func() bool {
			return a.Positions()[topic][0] > rec.Offset
		})
	}
	for _, want := range []string{
		`{"key":{"key":"a","start":0,"end":2},"value":1}`,
		`{"key":{"key":"a","start":0,"end":2},"value":2}`,
		`{"key":{"key":"a","start":2,"end":4},"value":1}`,
	} {
		if ev, _, data, ok := feed.next(); !ok || ev != "change" || data != want {
			t.Fatalf("the feed of a: %q %s %v, want %s", ev, data, ok, want)
		}
	}
}

// /topology names the instance's internal topics as they are, with its
// group (here a version's) in place of Describe's ${app}.
func TestTopologyNamesRealTopics(t *testing.T) {
	env, topic, top, _ := kvTable(t, "http-topology", 1)
	a := enginetest.StartApp(t, top, engine.Config{AppID: topic, Version: "v3", Brokers: env.Brokers})
	view, _ := projection.NewKeyValue("kv", "kv", serde.String, serde.Int64)
	views, _ := projection.NewRegistry(view)
	h, err := httpapi.New(httpapi.Config{Instance: a, Views: views, Topology: top})
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(h)
	defer s.Close()
	status, _, body := get(t, s, "/topology")
	if changelog, _ := a.ChangelogTopic("kv"); status != 200 || strings.Contains(body, "${app}") || !strings.Contains(body, changelog) {
		t.Errorf("/topology: %d\n%s\nwant %s named, and no ${app}", status, body, changelog)
	}
}
