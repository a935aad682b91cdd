package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/aggregate"
	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
	"github.com/oxbow-dev/oxbow/internal/await"
	"github.com/oxbow-dev/oxbow/internal/fixtures/inventory"
)

// serviceChildEnv names the service a child process of the crash
// campaign runs: "store" or "warehouse".
const serviceChildEnv = "SHOESTORE_SERVICE_CHILD"

// TestServiceChild is the crash campaign's child: it runs one service
// until SIGTERM (or SIGKILL). It does nothing in a normal test run.
func TestServiceChild(t *testing.T) {
	which := os.Getenv(serviceChildEnv)
	if which == "" {
		t.Skip("the crash campaign's child process; run by TestServicesCrashCampaign")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	level := slog.LevelWarn
	if os.Getenv(childLogDirEnv) != "" {
		level = slog.LevelDebug // the whole story goes to a file
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	dumpOnSignal(ctx)
	ready := func(url string) { fmt.Println("READY " + url) }
	brokers := strings.Split(os.Getenv("SHOESTORE_BROKERS"), ",")
	name, dir := os.Getenv("SHOESTORE_NAME"), os.Getenv("SHOESTORE_STATE")
	var err error
	switch which {
	case "store":
		err = run(ctx, config{Name: name, Addr: cmp.Or(os.Getenv("SHOESTORE_ADDR"), "127.0.0.1:0"), Brokers: brokers, StateDir: dir,
			InstanceID: cmp.Or(os.Getenv("SHOESTORE_INSTANCE"), "store-0"), Logger: log, Ready: ready,
			LeaveHangingTransactions: os.Getenv("SHOESTORE_LEAVE_HANGING") == "1"})
	case "warehouse":
		err = runWarehouse(ctx, warehouseConfig{Name: name, Addr: "127.0.0.1:0", Brokers: brokers, StateDir: dir, InstanceID: "warehouse-0", Logger: log, Ready: ready})
	default:
		t.Fatalf("%s=%q: neither store nor warehouse", serviceChildEnv, which)
	}
	if err != nil {
		t.Fatal(err)
	}
	if ctx.Err() == nil {
		t.Fatal("the service stopped without a SIGTERM")
	}
}

// startService runs the service in a child process with its state in dir,
// and waits until it serves; env adds to its environment.
func startService(t *testing.T, which, name, dir string, brokers []string, env ...string) *child {
	t.Helper()
	return startServiceCmd(t, exec.Command(os.Args[0], "-test.run", "^TestServiceChild$", "-test.v"), which, name, dir, brokers, env...)
}

// startServiceCmd is startService with the command that runs the test
// binary (in a network namespace, say).
func startServiceCmd(t *testing.T, cmd *exec.Cmd, which, name, dir string, brokers []string, env ...string) *child {
	t.Helper()
	cmd.Env = append(os.Environ(), serviceChildEnv+"="+which, "SHOESTORE_NAME="+name, "SHOESTORE_STATE="+dir,
		"SHOESTORE_BROKERS="+strings.Join(brokers, ","))
	cmd.Env = append(cmd.Env, env...)
	return startChild(t, which, cmd, func(line string) (string, bool) { return strings.CutPrefix(line, "READY ") })
}

// The crash campaign of the two services, each in a process of its own on
// real Kafka: eight shoes with reorder points, sold by three callers for a
// minute (most sales find the shoe sold out: the warehouse restocks after
// its default lead time), two of them discontinued half way, while the
// store and the warehouse are SIGKILLed at random moments and restarted,
// six times. When the sales stop and every shipment is settled: each
// shipment ordered was ordered once, delivered once, and either received
// by the store once or (its shoe discontinued) sent back once; the
// shipments of each shoe are numbered without a gap; and each shoe's stock
// in the store's view and in the warehouse's process manager equals the
// fold of the inventory's events, which never goes below zero.
func TestServicesCrashCampaign(t *testing.T) {
	env := kafkaenv.Real(t)
	if testing.Short() {
		t.Skip("a campaign of SIGKILLs under load; not with -short")
	}
	const (
		shoes   = 8
		callers = 3
		loadFor = time.Minute
		kills   = 6
		below   = 3
	)
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	name := fmt.Sprintf("crash%d", time.Now().UnixNano()%1_000_000_000)
	dirs := map[string]string{"store": t.TempDir(), "warehouse": t.TempDir()}
	svc := map[string]*child{}
	for _, which := range []string{"store", "warehouse"} {
		svc[which] = startService(t, which, name, dirs[which], env.Brokers)
	}
	t.Cleanup(func() {
		for _, s := range svc {
			select {
			case <-s.exited:
			default:
				_ = s.cmd.Process.Kill()
				<-s.exited
			}
		}
	})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	invContract := inventory.Contract(name + "-inventory")
	inv, err := invContract.NewClient(ctx, aggregate.ClientConfig{Brokers: env.Brokers})
	if err != nil {
		t.Fatal(err)
	}
	defer inv.Close()
	supplyAgg, err := newSupply(name + "-warehouse")
	if err != nil {
		t.Fatal(err)
	}
	supply, err := supplyAgg.NewClient(ctx, aggregate.ClientConfig{Brokers: env.Brokers})
	if err != nil {
		t.Fatal(err)
	}
	defer supply.Close()
	// submit retries a command with its id until it has an outcome: the
	// aggregate's owner may be down a while.
	submit := func(c *aggregate.Client[inventory.Command], shoe string, cmd inventory.Command, id string) (aggregate.Outcome, error) {
		for {
			o, err := c.Submit(ctx, shoe, cmd, aggregate.CommandID(id))
			if !errors.Is(err, aggregate.ErrNoOutcome) || ctx.Err() != nil {
				return o, err
			}
		}
	}
	shoe := func(i int) string { return fmt.Sprintf("shoe-%d", i) }
	for i := range shoes {
		if _, err := submit(inv, shoe(i), inventory.ReceiveShipment{Quantity: 5, UnitCost: 1000}, "first-"+shoe(i)); err != nil {
			t.Fatal(err)
		}
		for {
			_, err := supply.Submit(ctx, shoe(i), SetReorderPoint{Below: below, Order: 6, UnitCost: 900}, aggregate.CommandID("rp-"+shoe(i)))
			if err == nil {
				break
			}
			if !errors.Is(err, aggregate.ErrNoOutcome) {
				t.Fatal(err)
			}
		}
	}

	// The sales, and two shoes discontinued half way.
	var sold, refused atomic.Int64
	var wg sync.WaitGroup
	loadCtx, stopLoad := context.WithTimeout(ctx, loadFor)
	defer stopLoad()
	for c := range callers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(seed, uint64(10+c)))
			for n := 0; loadCtx.Err() == nil; n++ {
				o, err := submit(inv, shoe(r.IntN(shoes)), inventory.SellPair{Price: 2000}, fmt.Sprintf("sale-%d-%d", c, n))
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("a sale: %v", err)
					}
					return
				}
				if o.Status == aggregate.Accepted {
					sold.Add(1)
				} else {
					refused.Add(1)
				}
				select {
				case <-loadCtx.Done():
				case <-time.After(20 * time.Millisecond):
				}
			}
		})
	}
	discontinued := map[string]bool{shoe(0): true, shoe(1): true}
	time.AfterFunc(loadFor/2, func() {
		for s := range discontinued {
			if _, err := submit(inv, s, inventory.Discontinue{}, "discontinue-"+s); err != nil && ctx.Err() == nil {
				t.Errorf("discontinue %s: %v", s, err)
			}
		}
	})

	// The kills, at random moments of the load, of either service.
	start := time.Now()
	for k := range kills {
		at := loadFor * time.Duration(k) / kills
		at += time.Duration(rng.Int64N(int64(loadFor / kills / 2)))
		time.Sleep(time.Until(start.Add(at)))
		which := []string{"store", "warehouse"}[rng.IntN(2)]
		svc[which].kill(t)
		t.Logf("killed the %s at %v", which, time.Since(start).Round(time.Millisecond))
		time.Sleep(time.Duration(300+rng.IntN(1500)) * time.Millisecond)
		svc[which] = startService(t, which, name, dirs[which], env.Brokers)
	}
	wg.Wait()
	t.Logf("%d sales, %d refused", sold.Load(), refused.Load())
	if t.Failed() {
		t.FailNow()
	}

	// Settled: every shipment ordered has been received or sent back, and
	// no shoe in the range is below its reorder point.
	var h history
	await.NoError(t, 3*time.Minute, "every shipment settled", func() error {
		h = readHistory(t, env.Brokers, name, supplyAgg.Contract().EventTopic)
		for id, s := range h.shipments {
			if s.received+s.returned == 0 {
				return fmt.Errorf("shipment %s: ordered %d, delivered %d, not yet received or returned", id, s.ordered, s.delivered)
			}
		}
		for i := range shoes {
			if st := h.stock[shoe(i)]; !h.discontinued[shoe(i)] && st < below {
				return fmt.Errorf("%s: %d in stock, below %d, and no shipment under way", shoe(i), st, below)
			}
		}
		return nil
	})

	// Exactly once, each step of each shipment.
	perShoe := map[string][]int{}
	for id, s := range h.shipments {
		if s.ordered != 1 || s.delivered != 1 || s.received+s.returned != 1 {
			t.Errorf("shipment %s: ordered %d times, delivered %d, received %d, returned %d", id, s.ordered, s.delivered, s.received, s.returned)
		}
		if s.returned > 0 && !h.discontinued[s.shoe] {
			t.Errorf("shipment %s of %s went back, but the shoe is not discontinued", id, s.shoe)
		}
		var n int
		fmt.Sscanf(strings.TrimPrefix(id, s.shoe+"-"), "%d", &n)
		perShoe[s.shoe] = append(perShoe[s.shoe], n)
	}
	shipments := 0
	for s, ns := range perShoe {
		slices.Sort(ns)
		for i, n := range ns {
			if n != i+1 {
				t.Errorf("%s's shipments are numbered %v: not 1…%d", s, ns, len(ns))
				break
			}
		}
		shipments += len(ns)
	}
	if shipments < shoes {
		t.Errorf("%d shipments in all, fewer than the shoes: the load did not restock", shipments)
	}
	for s, neg := range h.negative {
		t.Errorf("%s's stock went below zero at event %d", s, neg)
	}
	// The store's view and the warehouse's process manager agree with the
	// events.
	for i := range shoes {
		s := shoe(i)
		want := h.stock[s]
		var got struct {
			Value struct {
				InStock int `json:"inStock"`
			} `json:"value"`
		}
		await.NoError(t, time.Minute, s+" in the store's view", func() error {
			if err := getJSON(svc["store"].url+"/views/inventory/keys/"+s, &got); err != nil {
				return err
			}
			if got.Value.InStock != want {
				return fmt.Errorf("%d in stock, the events say %d", got.Value.InStock, want)
			}
			return nil
		})
		var seen struct {
			Value struct {
				State Restock `json:"state"`
			} `json:"value"`
		}
		await.NoError(t, time.Minute, s+" in the warehouse's process manager", func() error {
			if err := getJSON(svc["warehouse"].url+"/views/restock/keys/"+s, &seen); err != nil {
				return err
			}
			if seen.Value.State.InStock != want {
				return fmt.Errorf("%d in stock, the events say %d", seen.Value.State.InStock, want)
			}
			return nil
		})
	}
	t.Logf("%d shipments settled exactly once across %d kills", shipments, kills)
	for _, which := range []string{"store", "warehouse"} {
		svc[which].stop(t)
	}
}

// history is what the inventory's and the supply's events say.
type history struct {
	shipments    map[string]*shipmentSteps
	stock        map[string]int
	negative     map[string]int // a shoe whose stock went below zero: at which of its events
	discontinued map[string]bool
}

type shipmentSteps struct {
	shoe                                   string
	ordered, delivered, received, returned int
}

// readHistory reads both services' event topics, read committed, from the
// start to their current end.
func readHistory(t *testing.T, brokers []string, name, supplyTopic string) history {
	t.Helper()
	invTopic := name + "-inventory-events"
	h := history{shipments: map[string]*shipmentSteps{}, stock: map[string]int{}, negative: map[string]int{}, discontinued: map[string]bool{}}
	steps := func(id, shoe string) *shipmentSteps {
		if h.shipments[id] == nil {
			h.shipments[id] = &shipmentSteps{shoe: shoe}
		}
		return h.shipments[id]
	}
	invEvents, supplyEvents := inventory.Events(), mustSupply(t, name).Contract().Events
	events := map[string]int{}
	readTopics(t, brokers, []string{invTopic, supplyTopic}, func(r *kgo.Record) {
		shoe := string(r.Key)
		if r.Topic == invTopic {
			e, err := invEvents.Decode(r.Value)
			if err != nil {
				t.Fatalf("an inventory event: %v", err)
			}
			events[shoe]++
			switch e := e.(type) {
			case inventory.ShipmentReceived:
				h.stock[shoe] += e.Quantity
				if e.Shipment != "" {
					steps(e.Shipment, shoe).received++
				}
			case inventory.PairSold:
				h.stock[shoe]--
			case inventory.PairReturned:
				h.stock[shoe]++
			case inventory.Discontinued:
				h.discontinued[shoe] = true
			}
			if _, ok := h.negative[shoe]; !ok && h.stock[shoe] < 0 {
				h.negative[shoe] = events[shoe]
			}
			return
		}
		e, err := supplyEvents.Decode(r.Value)
		if err != nil {
			t.Fatalf("a supply event: %v", err)
		}
		switch e := e.(type) {
		case ShipmentOrdered:
			steps(e.Shipment, shoe).ordered++
		case ShipmentDelivered:
			steps(e.Shipment, shoe).delivered++
		case ShipmentReturned:
			steps(e.Shipment, shoe).returned++
		}
	})
	return h
}

func mustSupply(t *testing.T, name string) *aggregateOfSupply {
	t.Helper()
	a, err := newSupply(name + "-warehouse")
	if err != nil {
		t.Fatal(err)
	}
	return a
}

type aggregateOfSupply = aggregate.Aggregate[Supply, SupplyCommand, SupplyEvent]

// readTopics hands fn every committed record of the topics up to their
// last stable offsets when it started: everything decided by then.
func readTopics(t *testing.T, brokers []string, topics []string, fn func(*kgo.Record)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Control records are kept so that a partition's position reaches its
	// last stable offset when a transaction's marker ends it.
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topics...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.KeepControlRecords())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	stable, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topics...)
	if err == nil {
		err = stable.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	left := map[topicPartition]int64{}
	stable.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[topicPartition{o.Topic, o.Partition}] = o.Offset
		}
	})
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %v: %v; left: %v", topics, ctx.Err(), left)
		}
		fs.EachRecord(func(r *kgo.Record) {
			tp := topicPartition{r.Topic, r.Partition}
			end, ok := left[tp]
			if !ok || r.Offset >= end {
				return
			}
			if !r.Attrs.IsControl() {
				fn(r)
			}
			if r.Offset+1 >= end {
				delete(left, tp)
			}
		})
	}
}

type topicPartition struct {
	topic     string
	partition int32
}

func getJSON(url string, v any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%d %s", resp.StatusCode, b)
	}
	return json.Unmarshal(b, v)
}
