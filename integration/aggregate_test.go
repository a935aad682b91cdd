package integration

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/aggregate"
	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
	inv "github.com/oxbow-dev/oxbow/internal/fixtures/inventory"
)

// aggregateTopology runs the shoe store's inventory aggregate of the given
// name.
func aggregateTopology(name string) *engine.Topology {
	a, err := inv.New(name)
	if err != nil {
		panic(err)
	}
	b := engine.NewBuilder()
	a.AddTo(b)
	top, err := b.Build()
	if err != nil {
		panic(err)
	}
	return top
}

// The aggregate campaign: two instances of the inventory aggregate run in
// child processes with exactly-once; four goroutines submit 1,000
// commands each to 50 aggregates through a Client in this process, some
// with expected versions, some repeating an earlier command's id, while one
// instance is killed with SIGKILL and restarted, a few times. Afterwards,
// from the whole event topic read committed: every aggregate's events have
// the versions 1, 2, 3, … with no gap and no repeat, each of a command
// submitted; each accepted command's events are exactly at the positions
// its outcome gave, and no other command's events name it; rejected
// commands and conflicts wrote nothing; every repeated command id got its
// first outcome back; every command with an expected version was accepted
// at that version or reported as a conflict with another.
func TestAggregateCampaign(t *testing.T) {
	env := kafkaenv.Real(t)
	if testing.Short() {
		t.Skip("a campaign of SIGKILLs under load; not with -short")
	}
	seed := campaignSeed(t)
	const (
		workers    = 4
		perWorker  = 1000
		window     = 8 // commands in flight per worker
		aggregates = 50
		kills      = 3
	)
	prefix := fmt.Sprintf("oxbow-it-agg-%x", rand.Uint32())
	a, err := inv.New(prefix)
	if err != nil {
		t.Fatal(err)
	}
	cmdTopic, eventTopic, replyTopic := a.Topics()
	createTopics(t, env, prefix, 6, cmdTopic, eventTopic, replyTopic)
	base := crashConfig{brokers: env.Brokers, appID: prefix, eos: true, aggregate: prefix, defaults: true}
	cfgA, cfgB := base, base
	cfgA.id, cfgA.stateDir = "agg-a", t.TempDir()
	cfgB.id, cfgB.stateDir = "agg-b", t.TempDir()
	children := []*crashChild{startCrashChild(t, cfgA), startCrashChild(t, cfgB)}
	t.Cleanup(func() {
		for _, ch := range children {
			select {
			case <-ch.exited:
			default:
				ch.kill(t)
			}
		}
	})
	for i, ch := range children {
		awaitReady(t, ch, fmt.Sprintf("instance %d", i))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client, err := a.NewClient(ctx, aggregate.ClientConfig{Brokers: env.Brokers, Timeout: 15 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	// The workers, if the test goroutine fails while they run: stopped
	// before the client closes and the test ends.
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()

	// What was submitted and what came back.
	type command struct {
		id, agg  string
		cmd      inv.Command
		expected *int64
		first    aggregate.Outcome // the first outcome got for the id
	}
	var (
		resMu     sync.Mutex
		commands  = map[string]*command{} // by id
		versions  = map[string]int64{}    // the latest version seen per aggregate
		repeats   []aggregate.Outcome     // outcomes of repeated ids, to compare with the firsts
		retries   atomic.Int64
		failures  atomic.Int64
		submitted atomic.Int64
	)
	submit := func(c *command) (aggregate.Outcome, error) {
		var opts []aggregate.SubmitOption
		opts = append(opts, aggregate.CommandID(c.id))
		if c.expected != nil {
			opts = append(opts, aggregate.ExpectedVersion(*c.expected))
		}
		for attempt := 0; ; attempt++ {
			o, err := client.Submit(ctx, c.agg, c.cmd, opts...)
			if errors.Is(err, aggregate.ErrNoOutcome) && attempt < 20 {
				// The owner was down: the command may or may not have been
				// decided. Its id makes asking again safe.
				retries.Add(1)
				continue
			}
			return o, err
		}
	}

	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			sem := make(chan struct{}, window)
			var inner sync.WaitGroup
			var mine []*command // this worker's commands with an outcome
			var mineMu sync.Mutex
			for i := range perWorker {
				sem <- struct{}{}
				c := &command{id: fmt.Sprintf("w%d-%d", w, i), agg: fmt.Sprintf("shoe-%02d", rng.IntN(aggregates))}
				switch k := rng.IntN(10); {
				case k < 5:
					c.cmd = inv.ReceiveShipment{Quantity: 1, UnitCost: 100}
				case k < 9:
					c.cmd = inv.SellPair{Price: 200}
				default:
					c.cmd = inv.AcceptReturn{Price: 200, Reason: "campaign"}
				}
				repeat := false
				switch k := rng.IntN(10); {
				case k < 2:
					mineMu.Lock()
					if len(mine) > 0 {
						prev := mine[rng.IntN(len(mine))]
						c = &command{id: prev.id, agg: prev.agg, cmd: prev.cmd, expected: prev.expected}
						repeat = true
					}
					mineMu.Unlock()
				case k < 4:
					resMu.Lock()
					v := versions[c.agg]
					resMu.Unlock()
					c.expected = &v
				}
				inner.Go(func() {
					defer func() { <-sem }()
					o, err := submit(c)
					submitted.Add(1)
					if ctx.Err() != nil {
						return // the test failed already
					}
					if err != nil {
						failures.Add(1)
						t.Errorf("command %s: %v", c.id, err)
						return
					}
					resMu.Lock()
					versions[c.agg] = max(versions[c.agg], o.Version)
					if repeat {
						repeats = append(repeats, o)
					} else if commands[c.id] == nil {
						c.first = o
						commands[c.id] = c
					}
					resMu.Unlock()
					if !repeat {
						mineMu.Lock()
						mine = append(mine, c)
						mineMu.Unlock()
					}
				})
			}
			inner.Wait()
		})
	}
	workersDone := make(chan struct{})
	go func() {
		wg.Wait()
		close(workersDone)
	}()

	// The kills, one instance at a time, while the workers run; both
	// must be alive before each kill (a child that died by itself fails
	// the campaign rather than pass for a planned kill). Planned by the
	// commands submitted, spread over the first three quarters of them:
	// the commands go faster than any fixed delay would guess.
	rng := rand.New(rand.NewPCG(seed, 99))
	killed := 0
	total := int64(workers * perWorker)
plan:
	for k := 0; k < kills; k++ {
		at := total*int64(k)/(kills+1) + 1 + rng.Int64N(total/(kills+1))
		for submitted.Load() < at {
			select {
			case <-workersDone:
				break plan
			case <-time.After(2 * time.Millisecond):
			}
		}
		i := rng.IntN(2)
		for j, ch := range children {
			alive(t, ch, fmt.Sprintf("instance %d", j))
		}
		killRunning(t, children[i], fmt.Sprintf("instance %d", i))
		killed++
		t.Logf("killed instance %d after %d commands", i, submitted.Load())
		time.Sleep(time.Duration(500+rng.IntN(1500)) * time.Millisecond) // down a while, under load
		cfg := cfgA
		if i == 1 {
			cfg = cfgB
		}
		children[i] = startCrashChild(t, cfg)
		awaitReady(t, children[i], fmt.Sprintf("instance %d, restarted", i))
	}
	<-workersDone
	t.Logf("%d commands (%d repeated ids), %d resubmitted after no outcome", submitted.Load(), len(repeats), retries.Load())
	if failures.Load() > 0 {
		t.FailNow()
	}
	if killed != kills {
		t.Errorf("%d of the %d planned kills happened: the commands were done first", killed, kills)
	}
	// Both instances ran to the end and stop cleanly.
	for i, ch := range children {
		alive(t, ch, fmt.Sprintf("instance %d", i))
	}
	for i, ch := range children {
		stopChild(t, ch, fmt.Sprintf("instance %d", i))
	}

	// The whole event log, read committed: every aggregate's versions are
	// 1, 2, 3, … and every event is of a command submitted.
	log := readEventLog(t, env, a)
	byCommand := map[string][]loggedEvent{}
	for agg, events := range log {
		for i, e := range events {
			if e.version != int64(i+1) {
				t.Errorf("aggregate %s: event %d at %+v has version %d: versions %v", agg, i, e.pos, e.version, versionsOf(events))
				break
			}
		}
		for _, e := range events {
			if commands[e.command] == nil {
				t.Errorf("aggregate %s: the event at %+v, version %d, is of command %q, never submitted or without an outcome", agg, e.pos, e.version, e.command)
			}
			byCommand[e.command] = append(byCommand[e.command], e)
		}
	}
	// Each aggregate's stock and pairs out (sold, not returned) after
	// each version, from its events.
	type stock struct{ inStock, out int64 }
	after := map[string][]stock{} // after[agg][v]: after version v
	for agg, events := range log {
		st := []stock{{}}
		for _, e := range events {
			s := st[len(st)-1]
			switch e.kind {
			case "ShipmentReceived":
				s.inStock++ // every shipment of the campaign is of one pair
			case "PairSold":
				s.inStock--
				s.out++
			case "PairReturned":
				s.inStock++
				s.out--
			default:
				t.Errorf("aggregate %s: an event of type %q", agg, e.kind)
			}
			st = append(st, s)
		}
		after[agg] = st
	}
	// The state a command was decided on: the version before its events.
	decidedOn := func(c *command) (stock, bool) {
		v := c.first.Version - int64(len(c.first.Events))
		st := after[c.agg]
		if v < 0 || v >= int64(len(st)) {
			return stock{}, false
		}
		return st[v], true
	}
	conflicts, rejections, accepted := 0, 0, 0
	for id, c := range commands {
		o := c.first
		got := byCommand[id]
		// A sale is refused exactly when no pair is in stock, a return
		// exactly when none is out.
		if st, ok := decidedOn(c); ok && o.Status != aggregate.Conflict {
			switch c.cmd.(type) {
			case inv.SellPair:
				if refused := o.Status == aggregate.Rejected; refused != (st.inStock == 0) {
					t.Errorf("command %s (a sale): %s with %d pairs in stock at version %d", id, o.Status, st.inStock, o.Version-int64(len(o.Events)))
				}
			case inv.AcceptReturn:
				if refused := o.Status == aggregate.Rejected; refused != (st.out == 0) {
					t.Errorf("command %s (a return): %s with %d pairs out at version %d", id, o.Status, st.out, o.Version-int64(len(o.Events)))
				}
			}
		} else if !ok {
			t.Errorf("command %s: decided on version %d of %s, which has %d events", id, o.Version-int64(len(o.Events)), c.agg, len(log[c.agg]))
		}
		switch o.Status {
		case aggregate.Accepted:
			accepted++
			if len(got) != len(o.Events) {
				t.Errorf("command %s: accepted with %d events, the log has %d", id, len(o.Events), len(got))
				continue
			}
			for i, p := range o.Events {
				if got[i].pos != p || got[i].version != o.Version-int64(len(o.Events))+int64(i)+1 {
					t.Errorf("command %s: event %d at %+v version %d in the log, the outcome says %+v version %d", id, i, got[i].pos, got[i].version, p, o.Version-int64(len(o.Events))+int64(i)+1)
				}
			}
			if c.expected != nil && o.Version-int64(len(o.Events)) != *c.expected {
				t.Errorf("command %s expected version %d and was accepted at %d", id, *c.expected, o.Version-int64(len(o.Events)))
			}
		case aggregate.Conflict:
			conflicts++
			if c.expected == nil || o.ExpectedVersion == nil || *o.ExpectedVersion != *c.expected || o.Version == *c.expected {
				t.Errorf("command %s: a conflict %+v for an expected version %v", id, o, c.expected)
			}
			if len(got) > 0 {
				t.Errorf("command %s: a conflict, but the log has %d events of it", id, len(got))
			}
		case aggregate.Rejected:
			rejections++
			if len(got) > 0 {
				t.Errorf("command %s: rejected, but the log has %d events of it", id, len(got))
			}
		}
	}
	for _, r := range repeats {
		first := commands[r.CommandID]
		if first == nil {
			t.Errorf("a repeated id %s without a first outcome", r.CommandID)
			continue
		}
		f := first.first
		if r.Status != f.Status || r.Version != f.Version || !slices.Equal(r.Events, f.Events) || (r.Rejection == nil) != (f.Rejection == nil) ||
			(r.Rejection != nil && r.Rejection.Code != f.Rejection.Code) {
			t.Errorf("command %s repeated: %+v, the first outcome %+v", r.CommandID, r, f)
		}
	}
	t.Logf("%d accepted, %d rejected, %d conflicts; %d events in %d aggregates", accepted, rejections, conflicts, countEvents(log), len(log))
	if conflicts == 0 || accepted == 0 {
		t.Errorf("the campaign exercised too little: %d accepted, %d conflicts", accepted, conflicts)
	}
}

type loggedEvent struct {
	pos     aggregate.Position
	version int64
	command string
	kind    string // the event's type
}

func versionsOf(es []loggedEvent) []int64 {
	var out []int64
	for _, e := range es {
		out = append(out, e.version)
	}
	return out
}

func countEvents(log map[string][]loggedEvent) int {
	n := 0
	for _, es := range log {
		n += len(es)
	}
	return n
}

// readEventLog reads the aggregate's event topic, read committed, from the
// start to its end once its producers have stopped (every transaction
// ended: the last stable offsets are the high watermarks), and returns each
// aggregate's events in order.
func readEventLog(t *testing.T, env *kafkaenv.Env, a interface {
	Topics() (string, string, string)
}) map[string][]loggedEvent {
	t.Helper()
	_, events, _ := a.Topics()
	// Control records are kept so that a partition's position reaches its
	// last stable offset even when a transaction's marker ends it.
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...), kgo.ConsumeTopics(events),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	adm := kadm.NewClient(cl)
	ends := map[int32]int64{}
	for {
		stable, err := adm.ListCommittedOffsets(ctx, events)
		if err == nil {
			err = stable.Error()
		}
		hw, herr := adm.ListEndOffsets(ctx, events)
		if err == nil {
			err = cmp.Or(herr, hw.Error())
		}
		if err != nil {
			t.Fatalf("the end offsets of %s: %v", events, err)
		}
		open := false
		clear(ends)
		stable.Each(func(o kadm.ListedOffset) {
			ends[o.Partition] = o.Offset
			if h, ok := hw.Lookup(events, o.Partition); !ok || h.Offset != o.Offset {
				open = true
			}
		})
		if !open && len(ends) > 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: a transaction is still open after 2m: last stable offsets %v", events, ends)
		case <-time.After(50 * time.Millisecond):
		}
	}
	log := map[string][]loggedEvent{}
	next := map[int32]int64{}
	short := func() bool {
		for p, end := range ends {
			if next[p] < end {
				return true
			}
		}
		return false
	}
	for short() {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%s: read to %v of %v after 2m", events, next, ends)
		}
		fs.EachError(func(topic string, p int32, err error) {
			t.Fatalf("%s[%d]: %v", topic, p, err)
		})
		fs.EachRecord(func(r *kgo.Record) {
			next[r.Partition] = r.Offset + 1
			if r.Attrs.IsControl() {
				return
			}
			e := loggedEvent{pos: aggregate.Position{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}}
			for _, h := range r.Headers {
				switch h.Key {
				case aggregate.HeaderAggregateVersion:
					e.version, _ = strconv.ParseInt(string(h.Value), 10, 64)
				case aggregate.HeaderCommandID:
					e.command = string(h.Value)
				}
			}
			var env struct {
				Type string `json:"type"`
			}
			if err := json.Unmarshal(r.Value, &env); err != nil {
				t.Errorf("%s offset %d: %v", r.Topic, r.Offset, err)
			}
			e.kind = env.Type
			log[string(r.Key)] = append(log[string(r.Key)], e)
		})
	}
	return log
}
