package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine/hanging"
	"github.com/oxbow-dev/oxbow/engine/hanging/hangingtest"
	"github.com/oxbow-dev/oxbow/internal/await"
	"github.com/oxbow-dev/oxbow/internal/faultkafka"
)

// The store's broker fails under it: the store at its defaults
// (exactly-once; transactions Kafka leaves open are ended as their
// coordinators decided) on a one-node Kafka that is SIGKILLed and
// restarted on its data four times and SIGSTOPped for 15 s four times,
// while three callers restock and sell shoes over HTTP, each command
// retried with its Idempotency-Key until it has an outcome. The store
// never exits; after each fault's end a new command is accepted within
// 30 s; and when the callers stop, every shoe's inventory and the till
// are what the outcomes make them.
func TestStoreBrokerFaults(t *testing.T) {
	t.Parallel() // beside the three-broker one: each holds its own cluster
	storeBrokerFaults(t, faultkafka.Get(t, "solo", 1))
}

// The same on three brokers, each fault on the next node.
func TestStoreBrokerFaultsCluster(t *testing.T) {
	t.Parallel()
	storeBrokerFaults(t, faultkafka.Get(t, "cluster", 3))
}

func storeBrokerFaults(t *testing.T, kc *faultkafka.Cluster) {
	const (
		callers = 3
		faults  = 8 // alternately a SIGKILL and restart, and a SIGSTOP
		hangFor = 15 * time.Second
		bound   = 30 * time.Second // from a fault's end to a command accepted
	)
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	name := fmt.Sprintf("bfaults%d", time.Now().UnixNano()%1_000_000_000)
	s := startService(t, "store", name, t.TempDir(), kc.Env.Brokers)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tally := newTally()
	probe := &caller{url: s.url, store: s, tally: tally, prefix: "probe"}
	// The first command: the store decides.
	probe.submit(ctx, t, "red", `{"type":"ReceiveShipment","data":{"quantity":5,"unitCost":3000}}`, 3*time.Minute)

	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := range callers {
		c := &caller{url: s.url, store: s, tally: tally, prefix: fmt.Sprintf("c%d", i), rng: rand.New(rand.NewPCG(seed, uint64(10+i)))}
		wg.Go(func() { c.load(ctx, t, stop) })
	}
	var recoveries []time.Duration
	for i := range faults {
		time.Sleep(time.Duration(2+rng.IntN(4)) * time.Second) // load before the fault
		alive := func() {
			select {
			case <-s.exited:
				t.Fatalf("the store exited during fault %d:\n%s", i+1, s.tail())
			default:
			}
		}
		alive()
		node := 1 + i%kc.Nodes
		kind := fmt.Sprintf("SIGKILL and restart of node %d", node)
		if i%2 == 0 {
			kc.Node(t, node, "kill")
			kc.Node(t, node, "start") // returns once the broker answers
		} else {
			kind = fmt.Sprintf("SIGSTOP of node %d for %v", node, hangFor)
			kc.Node(t, node, "pause")
			time.Sleep(hangFor) // the fault's length
			kc.Node(t, node, "resume")
		}
		end := time.Now()
		// Past the bound, the store's goroutines tell what it waits on.
		dump, again := time.AfterFunc(bound, s.dump), time.AfterFunc(4*bound, s.dump)
		probe.submit(ctx, t, "blue", fmt.Sprintf(`{"type":"ReceiveShipment","data":{"quantity":1,"unitCost":%d}}`, 2000+i), 3*time.Minute)
		dump.Stop()
		again.Stop()
		took := time.Since(end)
		alive()
		recoveries = append(recoveries, took)
		t.Logf("fault %d (%s): a new command accepted %v after its end", i+1, kind, took.Round(100*time.Millisecond))
		if took > bound {
			t.Errorf("fault %d (%s): a new command accepted only %v after the fault's end, past %v:\n%s", i+1, kind, took.Round(100*time.Millisecond), bound, s.tail())
		}
	}
	close(stop)
	wg.Wait()
	slices.Sort(recoveries)
	log := s.output()
	repaired := 0
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "repaired a transaction") {
			repaired++
			t.Logf("the store: %s", l)
		}
	}
	t.Logf("recoveries %v; transactions left open and repaired: %d; commands answered %v", recoveries, repaired, tally.statuses())

	// Every view agrees with the outcomes.
	for shoe, w := range tally.shoes {
		getUntil(t, s.url+"/views/inventory/keys/"+shoe, 2*time.Minute,
			fmt.Sprintf(`{"key":%q,"value":{"inStock":%d,"sold":%d,"returned":0}}`, shoe, w.received-w.sold, w.sold), s)
	}
	getUntil(t, s.url+"/views/till/keys/till", 2*time.Minute,
		fmt.Sprintf(`{"key":"till","value":{"revenueCents":%d,"transactions":%d,"sales":%d,"returns":0}}`, tally.revenue, tally.sales, tally.sales), s)
	// The daily sales count each sale through another repartition.
	for shoe, w := range tally.shoes {
		if err := await.Within(2*time.Minute, func() error {
			_, body := get(t, s.url+"/views/daily-sales/keys/"+shoe+"/windows")
			var daily struct {
				Windows []struct{ Value int64 } `json:"windows"`
			}
			if err := json.Unmarshal([]byte(body), &daily); err != nil {
				return fmt.Errorf("%v: %s", err, body)
			}
			sold := int64(0)
			for _, d := range daily.Windows {
				sold += d.Value
			}
			if sold != int64(w.sold) {
				return fmt.Errorf("%d sold in the daily sales, want %d: %s", sold, w.sold, body)
			}
			return nil
		}); err != nil {
			t.Errorf("%s: %v", shoe, err)
		}
	}
	if code, body := get(t, s.url+"/readyz"); code != 200 {
		t.Errorf("/readyz after the campaign: %d %s", code, body)
	}
	if strings.Contains(log, "level=ERROR") {
		t.Errorf("the store logged an error:\n%s", log)
	}
}

// With the repair off, a transaction Kafka left open on the store's
// commands is reported: /readyz answers 503 within 2 minutes naming it and
// the remedy, and commands answer 503 with Retry-After at once. Once the
// operator ends it as its coordinator decided (as `oxbow transactions
// repair` does), the store is ready again and the commands sent meanwhile
// get their outcomes.
func TestStoreHangingRepairOff(t *testing.T) {
	kc := faultkafka.Get(t, "solo", 1)
	name := fmt.Sprintf("bhang%d", time.Now().UnixNano()%1_000_000_000)
	s := startService(t, "store", name, t.TempDir(), kc.Env.Brokers, "SHOESTORE_LEAVE_HANGING=1")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	tally := newTally()
	c := &caller{url: s.url, store: s, tally: tally, prefix: "c"}
	c.submit(ctx, t, "red", `{"type":"ReceiveShipment","data":{"quantity":3,"unitCost":3000}}`, 3*time.Minute)

	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.Env.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close) // after VerificationOff's cleanup
	adm := kadm.NewClient(cl)
	commands, side := name+"-inventory-commands", name+"-side"
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, side); err != nil {
		t.Fatal(err)
	}
	td, err := adm.ListTopics(ctx, commands)
	if err != nil || td[commands].Err != nil {
		t.Fatalf("the commands topic: %v %v", err, td[commands].Err)
	}
	// Records the coordinator aborted, left open on every partition of
	// the commands.
	hangingtest.VerificationOff(ctx, t, adm)
	raw, err := hangingtest.Client(kc.Env.Brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	for _, p := range td[commands].Partitions.Numbers() {
		hangingtest.LeaveOpen(ctx, t, raw, fmt.Sprintf("%s-hang-%d", name, p), hangingtest.Partition{Topic: side}, hangingtest.Partition{Topic: commands, Partition: p}, "not a command", false)
	}
	left := time.Now()
	// A sale sent now waits behind them.
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		c.submit(ctx, t, "red", `{"type":"SellPair","data":{"price":1000}}`, 4*time.Minute)
	}()
	var ready string
	await.Until(t, 2*time.Minute, "/readyz to answer 503 naming the transaction left open", func() bool {
		code, body := get(t, s.url+"/readyz")
		ready = body
		return code == 503 && strings.Contains(body, commands+"[") && strings.Contains(body, "oxbow transactions repair --topic "+commands)
	})
	t.Logf("/readyz 503 after %v: %s", time.Since(left).Round(time.Second), ready)
	resp, err := http.Post(s.url+"/aggregates/inventory/green/commands", "application/json", strings.NewReader(`{"type":"ReceiveShipment","data":{"quantity":1,"unitCost":3000}}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "decider stalled") {
		t.Fatalf("a command while stalled: %d (Retry-After %q) %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if log := s.output(); !strings.Contains(log, `msg="a transaction Kafka left open stops this instance"`) || !strings.Contains(log, `repair="off`) {
		t.Fatalf("no ERROR naming the transaction, with the repair off:\n%s", log)
	}

	// The operator's repair.
	found, err := hanging.Find(ctx, cl, commands)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != len(td[commands].Partitions) {
		t.Fatalf("found %d transactions left open on %s, want one a partition: %v", len(found), commands, found)
	}
	for _, f := range found {
		if f.Decision != hanging.Abort {
			t.Fatalf("%v: want the abort its coordinator decided", f)
		}
	}
	if _, err := hanging.Repair(ctx, cl, found); err != nil {
		t.Fatal(err)
	}
	<-sent
	await.Until(t, time.Minute, "/readyz to answer 200 after the repair", func() bool {
		code, _ := get(t, s.url+"/readyz")
		return code == 200
	})
	getUntil(t, s.url+"/views/inventory/keys/red", time.Minute, `{"key":"red","value":{"inStock":2,"sold":1,"returned":0}}`, s)
}

// tally is what the commands' outcomes make of the views.
type tally struct {
	mu       sync.Mutex
	shoes    map[string]*shoeTally
	sales    int
	revenue  int64
	answered map[int]int // HTTP status: how many answers
}

type shoeTally struct{ received, sold int }

func newTally() *tally {
	return &tally{shoes: map[string]*shoeTally{}, answered: map[int]int{}}
}

func (ta *tally) statuses() string {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	return fmt.Sprint(ta.answered)
}

// caller sends commands to the store over HTTP.
type caller struct {
	url    string
	urls   []string     // if set, the URLs it sends to in turn instead
	hc     *http.Client // if set, the client it sends with
	store  *child
	tally  *tally
	prefix string // of its Idempotency-Keys
	rng    *rand.Rand
	n      int
}

// load restocks and sells shoes until stop closes.
func (c *caller) load(ctx context.Context, t *testing.T, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		shoe := []string{"red", "blue", "green"}[c.rng.IntN(3)]
		cmd := `{"type":"SellPair","data":{"price":1000}}`
		if c.rng.IntN(3) == 0 {
			cmd = fmt.Sprintf(`{"type":"ReceiveShipment","data":{"quantity":%d,"unitCost":2500}}`, 1+c.rng.IntN(3))
		}
		if !c.submit(ctx, t, shoe, cmd, 3*time.Minute) {
			return
		}
	}
}

// submit sends cmd to shoe's inventory with an Idempotency-Key of its own,
// again with it until the store answers with an outcome, and tallies the
// outcome; it fails the test if none comes within limit. It reports false
// if the test has failed.
func (c *caller) submit(ctx context.Context, t *testing.T, shoe, cmd string, limit time.Duration) bool {
	c.n++
	key := fmt.Sprintf("%s-%d", c.prefix, c.n)
	hc := c.hc
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	deadline := time.Now().Add(limit)
	for attempt := 0; ; attempt++ {
		url := c.url
		if len(c.urls) > 0 {
			url = c.urls[(c.n+attempt)%len(c.urls)]
		}
		if ctx.Err() != nil {
			return false
		}
		if time.Now().After(deadline) {
			t.Errorf("command %s (%s on %s): no outcome within %v:\n%s", key, cmd, shoe, limit, c.store.tail())
			return false
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/aggregates/inventory/"+shoe+"/commands", strings.NewReader(cmd))
		if err != nil {
			t.Error(err)
			return false
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := hc.Do(req)
		if err != nil {
			time.Sleep(250 * time.Millisecond) // the store is there: retry
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		c.tally.mu.Lock()
		c.tally.answered[resp.StatusCode]++
		c.tally.mu.Unlock()
		var o struct {
			Status string `json:"status"`
		}
		switch resp.StatusCode {
		case 200, 422:
			if err := json.Unmarshal(body, &o); err != nil || (o.Status != "accepted" && o.Status != "rejected") {
				t.Errorf("command %s (%s on %s): %d %s", key, cmd, shoe, resp.StatusCode, body)
				return false
			}
		case 503, 504, 502:
			if resp.StatusCode == 503 {
				time.Sleep(250 * time.Millisecond)
			}
			continue
		default:
			t.Errorf("command %s (%s on %s): %d %s", key, cmd, shoe, resp.StatusCode, body)
			return false
		}
		if o.Status == "accepted" {
			c.tally.add(shoe, cmd)
		}
		return true
	}
}

// add tallies an accepted command.
func (ta *tally) add(shoe, cmd string) {
	var c struct {
		Type string `json:"type"`
		Data struct {
			Quantity int   `json:"quantity"`
			Price    int64 `json:"price"`
		} `json:"data"`
	}
	_ = json.Unmarshal([]byte(cmd), &c)
	ta.mu.Lock()
	defer ta.mu.Unlock()
	st := ta.shoes[shoe]
	if st == nil {
		st = &shoeTally{}
		ta.shoes[shoe] = st
	}
	switch c.Type {
	case "ReceiveShipment":
		st.received += c.Data.Quantity
	case "SellPair":
		st.sold++
		ta.sales++
		ta.revenue += c.Data.Price
	}
}

// get GETs url and returns the status and body (0 if it cannot).
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	return getWith(&http.Client{Timeout: 10 * time.Second}, url)
}

// getWith is get with the client hc.
func getWith(hc *http.Client, url string) (int, string) {
	resp, err := hc.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// getUntil GETs url until it answers 200 with want (compact JSON), and
// fails the test with the last answer if it does not within limit.
func getUntil(t *testing.T, url string, limit time.Duration, want string, s *child) {
	t.Helper()
	getUntilWith(t, &http.Client{Timeout: 10 * time.Second}, url, limit, want, s)
}

// getUntilWith is getUntil with the client hc.
func getUntilWith(t *testing.T, hc *http.Client, url string, limit time.Duration, want string, s *child) {
	t.Helper()
	var last string
	if err := await.Within(limit, func() error {
		code, body := getWith(hc, url)
		last = fmt.Sprintf("%d %s", code, body)
		if code != 200 {
			return fmt.Errorf("%s", last)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, []byte(body)); err != nil {
			return err
		}
		if compact.String() != want {
			return fmt.Errorf("%s", compact.String())
		}
		return nil
	}); err != nil {
		t.Fatalf("GET %s: %v, want %s:\n%s", url, err, want, s.tail())
	}
}
