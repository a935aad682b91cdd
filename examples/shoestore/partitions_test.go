package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/internal/faultkafka"
	"github.com/oxbow-dev/oxbow/internal/faultnet"
)

var partitionRounds = flag.Int("partition-rounds", 1, "TestStoreNetworkPartitions: how many times it inflicts its list of faults (CI: 1)")

// The network fails under the store: three brokers and three instances of
// the store (its defaults, exactly-once), each on a host of its own in a
// network namespace, and callers on one more host sending commands to the
// instances in turn, each retried with its Idempotency-Key until it has
// an outcome. In turn, for 20 s each: an instance cut off the brokers; a
// broker cut off the other brokers; the instances cut off each other
// (their HTTP forwarding); an instance's packets to the brokers lost, the
// brokers' to it not; and 500 ms of delay with 5% loss on an instance's
// link, then on a broker's. After each fault heals, a new command is
// accepted through each instance within 30 s; no instance exits; and when
// the callers stop, every instance serves the inventory and the till that
// the outcomes make. -partition-rounds repeats the list.
func TestStoreNetworkPartitions(t *testing.T) {
	const (
		callers  = 3
		faultFor = 20 * time.Second
		bound    = 30 * time.Second // from a fault's heal to a command accepted through an instance
	)
	n := faultnet.New(t, "b1", "b2", "b3", "i1", "i2", "i3", "client")
	brokers := []*faultnet.Host{n.Host("b1"), n.Host("b2"), n.Host("b3")}
	instances := []*faultnet.Host{n.Host("i1"), n.Host("i2"), n.Host("i3")}
	kc := faultkafka.InNet(t, brokers...)
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 3))

	name := fmt.Sprintf("partitions%d", time.Now().UnixNano()%1_000_000_000)
	hc := n.Host("client").Client(30 * time.Second)
	defer hc.CloseIdleConnections()
	probeReady := n.Host("client").Client(5 * time.Second)
	defer probeReady.CloseIdleConnections()
	var stores []*child
	var urls []string
	for i, h := range instances {
		s := startServiceCmd(t, h.Command(os.Args[0], "-test.run", "^TestServiceChild$", "-test.v"), "store", name,
			filepath.Join(t.TempDir(), h.Name), kc.Env.Brokers, "SHOESTORE_ADDR="+h.IP+":8080", fmt.Sprintf("SHOESTORE_INSTANCE=store-%d", i))
		stores = append(stores, s)
		urls = append(urls, s.url)
	}
	tails := func() string {
		var b strings.Builder
		for i, s := range stores {
			fmt.Fprintf(&b, "---- instance %d ----\n%s\n", i+1, s.tail())
		}
		return b.String()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tally := newTally()
	probe := &caller{urls: urls, hc: hc, store: stores[0], tally: tally, prefix: "probe"}
	probe.submit(ctx, t, "red", `{"type":"ReceiveShipment","data":{"quantity":5,"unitCost":3000}}`, 3*time.Minute)
	awaitSettled(t, hc, urls)

	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := range callers {
		c := &caller{urls: urls, hc: hc, store: stores[i], tally: tally, prefix: fmt.Sprintf("c%d", i), rng: rand.New(rand.NewPCG(seed, uint64(10+i)))}
		wg.Go(func() { c.load(ctx, t, stop) })
	}
	both := func(a, b *faultnet.Host) { n.Cut(t, a, b); n.Cut(t, b, a) }
	faults := []struct {
		name  string
		apart int // 1 + the instance Kafka no longer answers, whose /readyz must then say so (0: none)
		do    func()
	}{
		{"instance 1 cut off the brokers", 1, func() {
			for _, b := range brokers {
				both(instances[0], b)
			}
		}},
		{"broker 2 cut off the other brokers", 0, func() { both(brokers[1], brokers[0]); both(brokers[1], brokers[2]) }},
		{"the instances cut off each other", 0, func() {
			both(instances[0], instances[1])
			both(instances[0], instances[2])
			both(instances[1], instances[2])
		}},
		{"instance 2's packets to the brokers lost (one direction)", 2, func() {
			for _, b := range brokers {
				n.Cut(t, instances[1], b)
			}
		}},
		{"500 ms delay and 5% loss on instance 3's link", 0, func() { n.Degrade(t, instances[2], 500*time.Millisecond, 0.05) }},
		{"500 ms delay and 5% loss on broker 1's link", 0, func() { n.Degrade(t, brokers[0], 500*time.Millisecond, 0.05) }},
	}
	alive := func(when string) {
		for i, s := range stores {
			select {
			case <-s.exited:
				t.Fatalf("instance %d exited %s:\n%s", i+1, when, s.tail())
			default:
			}
		}
	}
	var recoveries []time.Duration
	k := 0
	for round := range *partitionRounds {
		for _, f := range faults {
			time.Sleep(time.Duration(2+rng.IntN(4)) * time.Second) // load before the fault
			alive("before " + f.name)
			f.do()
			time.Sleep(faultFor) // the fault's length
			var ready []string
			for _, u := range urls {
				code, body := getWith(probeReady, u+"/readyz")
				ready = append(ready, fmt.Sprintf("%d %s", code, strings.TrimSpace(body)))
			}
			t.Logf("round %d, %s: /readyz at its end: %q", round+1, f.name, ready)
			if i := f.apart - 1; i >= 0 && !strings.Contains(ready[i], "503") {
				t.Errorf("round %d, %s: instance %d answered /readyz with %s", round+1, f.name, i+1, ready[i])
			}
			n.Heal(t)
			healed := time.Now()
			// A new command through each instance, each forwarded to
			// the instance whose task owns the shoe if another.
			for i, u := range urls {
				k++
				p := &caller{url: u, hc: hc, store: stores[i], tally: tally, prefix: fmt.Sprintf("probe%d", k)}
				p.submit(ctx, t, "blue", fmt.Sprintf(`{"type":"ReceiveShipment","data":{"quantity":1,"unitCost":%d}}`, 2000+k), 3*time.Minute)
			}
			took := time.Since(healed)
			alive("after " + f.name)
			recoveries = append(recoveries, took)
			t.Logf("round %d, %s: a new command accepted through each instance %v after the heal", round+1, f.name, took.Round(100*time.Millisecond))
			if took > bound {
				t.Errorf("round %d, %s: a new command accepted through each instance only %v after the heal, past %v:\n%s",
					round+1, f.name, took.Round(100*time.Millisecond), bound, tails())
			}
		}
	}
	close(stop)
	wg.Wait()
	slices.Sort(recoveries)
	t.Logf("recoveries %v; commands answered %v", recoveries, tally.statuses())
	for i, s := range stores {
		said := map[string]int{}
		for _, l := range strings.Split(s.output(), "\n") {
			if lvl, _, ok := strings.Cut(l, " msg="); ok && (strings.Contains(lvl, "level=WARN") || strings.Contains(lvl, "level=ERROR")) {
				msg := l[strings.Index(l, " msg=")+5:]
				if len(msg) > 120 {
					msg = msg[:120]
				}
				said[lvl[strings.Index(lvl, "level="):]+" "+msg]++
			}
		}
		t.Logf("instance %d said: %v", i+1, said)
	}

	// Every instance serves what the outcomes make.
	for i, u := range urls {
		for shoe, w := range tally.shoes {
			getUntilWith(t, hc, u+"/views/inventory/keys/"+shoe, 2*time.Minute,
				fmt.Sprintf(`{"key":%q,"value":{"inStock":%d,"sold":%d,"returned":0}}`, shoe, w.received-w.sold, w.sold), stores[i])
		}
		getUntilWith(t, hc, u+"/views/till/keys/till", 2*time.Minute,
			fmt.Sprintf(`{"key":"till","value":{"revenueCents":%d,"transactions":%d,"sales":%d,"returns":0}}`, tally.revenue, tally.sales, tally.sales), stores[i])
		if code, body := getWith(hc, u+"/readyz"); code != 200 {
			t.Errorf("instance %d's /readyz after the campaign: %d %s", i+1, code, body)
		}
	}
}
