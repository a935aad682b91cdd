package integration

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/httpapi"
	"github.com/oxbow-dev/oxbow/internal/await"
	"github.com/oxbow-dev/oxbow/internal/faultkafka"
	"github.com/oxbow-dev/oxbow/projection"
)

// Broker faults: the brokers under an exactly-once instance are killed,
// restarted on their data and hung, and the instance rides it out (it never
// exits), goes on within seconds of the brokers answering again, and its
// output stays exact. They run on clusters of their own (scripts/services.sh
// start kafka-solo, kafka-cluster), never on the broker other tests share.

// progress waits until the instance's committed input passes from and
// returns how long that took; it fails the test if the child exits or
// nothing is committed within limit. A transaction Kafka leaves open
// meanwhile (a broker restart can drop its markers: see package hanging)
// is the instance's to find and repair, within the time counted.
func progress(ctx context.Context, t *testing.T, adm *kadm.Client, c crashConfig, ch *crashChild, from int64, limit time.Duration, what string) time.Duration {
	t.Helper()
	start := time.Now()
	if err := await.Within(limit, func() error {
		alive(t, ch, what)
		if committedInputErr(ctx, adm, c) <= from {
			return errNoProgress
		}
		return nil
	}); err != nil {
		// What the test itself sees, apart from the instance: the
		// group's committed input, and the input's end (whether the
		// feeder still writes).
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		offs, ferr := adm.FetchOffsets(lctx, c.appID)
		ends, lerr := adm.ListEndOffsets(lctx, c.in)
		cancel()
		t.Fatalf("%s: no input committed within %v (from %d; now the group's offsets %v, err %v; the input's ends %v, err %v):\n%s",
			what, limit, from, offs, ferr, ends, lerr, ch.output())
	}
	return time.Since(start)
}

// errNoProgress is what a wait for progress returns until it sees some.
var errNoProgress = errors.New("no progress yet")

// written waits until the instance writes to topic and returns how long
// that took; it fails the test if the child exits or nothing is written
// within limit.
func written(ctx context.Context, t *testing.T, adm *kadm.Client, topic string, ch *crashChild, limit time.Duration, what string) time.Duration {
	t.Helper()
	start := time.Now()
	end := func() int64 {
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		ends, err := adm.ListEndOffsets(lctx, topic)
		if err != nil {
			return -1
		}
		var sum int64
		ends.Each(func(o kadm.ListedOffset) {
			if o.Err != nil {
				sum = -1 << 62
			}
			sum += o.Offset
		})
		return sum
	}
	from := end()
	for from < 0 {
		from = end()
	}
	if err := await.Within(limit-time.Since(start), func() error {
		alive(t, ch, what)
		if end() <= from {
			return errNoProgress
		}
		return nil
	}); err != nil {
		t.Fatalf("%s: nothing written to %s within %v:\n%s", what, topic, limit, ch.output())
	}
	return time.Since(start)
}

// committedInputErr is committedInput that reads an unreachable broker as
// no progress (-1) rather than failing.
func committedInputErr(ctx context.Context, adm *kadm.Client, c crashConfig) int64 {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	offs, err := adm.FetchOffsets(ctx, c.appID)
	if err != nil {
		return -1
	}
	var sum int64
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Topic == c.in && o.Err == nil {
			sum += o.At
		}
	})
	return sum
}

// The single broker under an exactly-once instance at the default
// configuration is SIGKILLed and restarted on its data three times: the
// instance never exits, commits new input within 10s of the broker
// answering again each time, and its output and store are exact.
func TestBrokerRestartSingle(t *testing.T) {
	brokerRestartSingle(t, true)
}

// The same at least once: the instance never exits, and nothing is lost.
func TestBrokerRestartSingleAtLeastOnce(t *testing.T) {
	brokerRestartSingle(t, false)
}

func brokerRestartSingle(t *testing.T, eos bool) {
	f := faultkafka.Get(t, "solo", 1)
	seed := campaignSeed(t)
	rng := rand.New(rand.NewPCG(seed, 51))
	c := newCrashTopicsN(t, f.Env, "broker-solo", 3)
	c.eos, c.defaults = eos, true
	input := newCrashInput(t, f.Env, c.in, seed, 52)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if err := input.batch(ctx, 2000); err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(input.cl)
	ch := startCrashChild(t, c)
	awaitReady(t, ch, "the instance")
	feed := startFeeder(t, input)
	var recovery []time.Duration
	for i := range 3 {
		time.Sleep(time.Duration(2000+rng.IntN(2000)) * time.Millisecond)
		alive(t, ch, fmt.Sprintf("before fault %d", i))
		f.Node(t, 1, "kill")
		down := time.Duration(1000+rng.IntN(4000)) * time.Millisecond
		time.Sleep(down)
		f.Node(t, 1, "start")
		var d time.Duration
		if eos {
			d = progress(ctx, t, adm, c, ch, committedInputErr(ctx, adm, c), time.Minute, fmt.Sprintf("fault %d", i))
		} else {
			// At least once commits every 30s: processing shows first in
			// the re-keyed records it writes.
			d = written(ctx, t, adm, c.appID+"-by-word-repartition", ch, time.Minute, fmt.Sprintf("fault %d", i))
		}
		recovery = append(recovery, d)
		t.Logf("fault %d: broker down %v; the instance went on %v after it answered", i, down.Round(time.Millisecond), d.Round(time.Millisecond))
	}
	want := feed.stop(t)
	if err := input.batch(ctx, 2000); err != nil {
		t.Fatal(err)
	}
	t.Logf("recovery after the broker answered: %v", recovery)
	for _, l := range strings.Split(ch.output(), "\n") {
		if strings.Contains(l, "a transaction Kafka left open") {
			t.Logf("the instance: %s", l)
		}
	}
	if m := slices.Max(recovery); m >= 10*time.Second {
		t.Errorf("the instance took %v after the broker answered to commit new input; want below 10s", m)
	}
	stopChild(t, ch, "the instance")
	if !eos {
		complete := atLeast(want)
		if _, store := finishCampaign(t, f.Env, c, want, false, complete); !complete(store) {
			t.Errorf("store lost updates: %s", diffCounts(store, want))
		}
		return
	}
	exact := func(m map[string]int64) bool { return maps.Equal(m, want) }
	seqs, store := finishCampaign(t, f.Env, c, want, true, exact)
	checkGrowing(t, seqs)
	if !maps.Equal(store, want) {
		t.Errorf("store differs from the input's counts: %s", diffCounts(store, want))
	}
}

// coordinator returns the node of the coordinator of key (a group, or a
// transactional id with txn), asking until a node answers.
func coordinator(ctx context.Context, t *testing.T, adm *kadm.Client, key string, txn bool) int {
	t.Helper()
	node := -1
	await.NoError(t, time.Minute, "a coordinator for "+key, func() error {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var rs kadm.FindCoordinatorResponses
		if txn {
			rs = adm.FindTxnCoordinators(cctx, key)
		} else {
			rs = adm.FindGroupCoordinators(cctx, key)
		}
		cancel()
		if r, ok := rs[key]; ok && r.Err == nil {
			node = int(r.NodeID)
			return nil
		}
		return fmt.Errorf("%v", rs)
	})
	return node
}

// Two exactly-once instances at the default configuration on a cluster of
// three brokers (every topic, internal ones included, replicated on all
// three with min.insync.replicas 2, as the cluster's defaults say) while
// brokers fail: the group coordinator's broker and each instance's
// transaction coordinator's are SIGKILLed and restarted, another broker is
// hung (SIGSTOP) for longer than a request's timeout, then the group
// coordinator's, and the group coordinator's is killed again. The
// instances never exit, processing goes on during each fault but a hung
// coordinator and after it (recovery times logged), and the output is
// exact.
func TestBrokerFaultsCluster(t *testing.T) {
	f := faultkafka.Get(t, "cluster", 3)
	seed := campaignSeed(t)
	rng := rand.New(rand.NewPCG(seed, 61))
	c := newCrashTopicsN(t, f.Env, "broker-cluster", 6)
	c.eos, c.defaults = true, true
	input := newCrashInput(t, f.Env, c.in, seed, 62)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	if err := input.batch(ctx, 2000); err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(input.cl)
	ids := []string{"cluster-0", "cluster-1"}
	children := make([]*crashChild, len(ids))
	for i, id := range ids {
		cc := c
		cc.id, cc.stateDir = id, t.TempDir()
		children[i] = startCrashChild(t, cc)
		t.Cleanup(func() {
			select {
			case <-children[i].exited:
			default:
				children[i].kill(t)
			}
		})
	}
	for i, ch := range children {
		awaitReady(t, ch, ids[i])
	}
	// The internal topics got the cluster's replication.
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	internal := 0
	for _, td := range topics.Sorted() {
		if !strings.HasPrefix(td.Topic, c.appID+"-") || td.Topic == c.in || td.Topic == c.out {
			continue
		}
		internal++
		for _, p := range td.Partitions {
			if len(p.Replicas) != 3 {
				t.Errorf("internal topic %s[%d] has %d replicas; the cluster's default is 3", td.Topic, p.Partition, len(p.Replicas))
			}
		}
	}
	if internal < 2 {
		t.Errorf("%d internal topics found; want the repartition topic and the changelog", internal)
	}
	feed := startFeeder(t, input)
	time.Sleep(3 * time.Second)
	checkAlive := func(what string) {
		for i, ch := range children {
			alive(t, ch, ids[i]+" "+what)
		}
	}
	type fault struct {
		name string
		node func() int
		kind string // kill or pause
		down time.Duration
	}
	txnID := func(i int) string { return c.appID + "-" + ids[i] }
	coordinators := func() map[int]bool {
		return map[int]bool{coordinator(ctx, t, adm, c.appID, false): true,
			coordinator(ctx, t, adm, txnID(0), true): true, coordinator(ctx, t, adm, txnID(1), true): true}
	}
	faults := []fault{
		{"the group coordinator's broker", func() int { return coordinator(ctx, t, adm, c.appID, false) }, "kill", 30 * time.Second},
		{"the transaction coordinator of " + ids[0], func() int { return coordinator(ctx, t, adm, txnID(0), true) }, "kill", 30 * time.Second},
		{"the transaction coordinator of " + ids[1], func() int { return coordinator(ctx, t, adm, txnID(1), true) }, "kill", 30 * time.Second},
		// A hung broker: one that is no coordinator of the campaign's if
		// there is one (the next fault hangs a coordinator).
		{"a broker hung", func() int {
			busy := coordinators()
			var free []int
			for n := 1; n <= 3; n++ {
				if !busy[n] {
					free = append(free, n)
				}
			}
			if len(free) == 0 {
				return 1 + rng.IntN(3)
			}
			return free[rng.IntN(len(free))]
		}, "pause", 40 * time.Second},
		// A hung coordinator: the cluster fences its broker after 9s and
		// moves the coordinator, but every request the instances' clients
		// still send to the hung broker (the coordinator franz-go keeps,
		// leaders in stale metadata, a seed) waits out a timeout, and the
		// aborts that the new producer ids ask for wait for the brokers'
		// own request timeout (30s) on the markers they had sent it:
		// processing may resume only when it answers again (see the
		// runtime's trouble.go): a hung coordinator may stall it. The
		// output stays exact.
		{"the group coordinator's broker hung", func() int { return coordinator(ctx, t, adm, c.appID, false) }, "pause", 60 * time.Second},
		{"the group coordinator's broker again", func() int { return coordinator(ctx, t, adm, c.appID, false) }, "kill", 30 * time.Second},
	}
	for i, fl := range faults {
		checkAlive(fmt.Sprintf("before fault %d", i))
		node := fl.node()
		stalls := fl.kind == "pause" && coordinators()[node]
		from := committedInputErr(ctx, adm, c)
		start := time.Now()
		f.Node(t, node, fl.kind)
		// Two of the three brokers hold every partition: processing goes
		// on while the third is away, once the cluster has moved its
		// leaders and coordinators (the controller waits out the
		// broker's session, 9s, before it moves a dead one's).
		var during time.Duration
		for time.Since(start) < fl.down {
			checkAlive(fmt.Sprintf("during fault %d", i))
			if during == 0 && committedInputErr(ctx, adm, c) > from {
				during = time.Since(start)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if during == 0 && !stalls {
			t.Errorf("fault %d (%s of node %d): no input committed in the %v the node was away; two brokers of three should have served", i, fl.kind, node, fl.down)
		}
		if fl.kind == "kill" {
			f.Node(t, node, "start")
		} else {
			f.Node(t, node, "resume")
		}
		at := committedInputErr(ctx, adm, c)
		after := progress(ctx, t, adm, c, children[0], at, 2*time.Minute, fmt.Sprintf("fault %d", i))
		checkAlive(fmt.Sprintf("after fault %d", i))
		went := "no input committed while it was away"
		if during > 0 {
			went = fmt.Sprintf("processing went on %v after the fault began", during.Round(time.Millisecond))
		}
		t.Logf("fault %d: %s, %s of node %d for %v: %s; %v after the node was back",
			i, fl.name, fl.kind, node, fl.down, went, after.Round(time.Millisecond))
		time.Sleep(3 * time.Second)
	}
	want := feed.stop(t)
	if err := input.batch(ctx, 2000); err != nil {
		t.Fatal(err)
	}
	seqs := readCounts(t, f.Env, c.out, want, true, func(m map[string]int64) bool { return maps.Equal(m, want) }, 3*time.Minute)
	checkGrowing(t, seqs)
	checkEcho(t, f.Env, c, total(want), true)
	for i, ch := range children {
		stopChild(t, ch, ids[i])
	}
}

// An exactly-once instance whose only broker stays away: it is Degraded
// meanwhile (App.Trouble says why, /readyz answers 503 "degraded", /healthz
// still 200), and once TaskTimeout has passed Run returns an error that
// names the brokers and the timeout. (A TaskTimeout shorter than the
// default's 5m, to see it run out.)
func TestBrokerGoneTaskTimeout(t *testing.T) {
	f := faultkafka.Get(t, "solo", 1)
	t.Cleanup(func() { f.Node(t, 1, "resume") })
	seed := campaignSeed(t)
	c := newCrashTopicsN(t, f.Env, "broker-gone", 3)
	c.eos, c.defaults = true, true
	input := newCrashInput(t, f.Env, c.in, seed, 72)
	cfg := c.engineConfig()
	cfg.TaskTimeout = 20 * time.Second
	app, err := engine.NewApp(crashTopology(c.in, c.out), cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- app.Run(context.Background()) }()
	t.Cleanup(func() { _ = app.Close() })
	h, err := httpapi.New(httpapi.Config{Instance: app, Views: mustRegistry(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, rec.Body.String()
	}
	<-app.Ready()
	feed := startFeeder(t, input)
	await.Until(t, time.Minute, "more than 2000 input records committed", func() bool {
		return committedInputErr(context.Background(), kadm.NewClient(input.cl), c) > 2000
	})
	if code, body := get("/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz before the fault: %d %s", code, body)
	}
	// The broker goes during the kill's call (which returns once it has
	// gone): the instance may see it before the call returns.
	killed := time.Now()
	f.Node(t, 1, "kill")
	await.NoError(t, time.Minute, "the instance degraded after the broker went", func() error {
		if s := app.State(); s != engine.AppDegraded {
			select {
			case err := <-done:
				t.Fatalf("Run returned before the instance was degraded: %v", err)
			default:
			}
			return fmt.Errorf("%v", s)
		}
		return nil
	})
	t.Logf("degraded %v after the broker went: %v", time.Since(killed).Round(time.Millisecond), app.Trouble())
	if app.Trouble() == nil {
		t.Error("a degraded instance without Trouble")
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "degraded") {
		t.Errorf("/readyz while degraded: %d %s", code, body)
	}
	if code, body := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz while degraded: %d %s", code, body)
	}
	select {
	case err := <-done:
		t.Logf("Run returned %v after the broker went: %v", time.Since(killed).Round(time.Millisecond), err)
		if err == nil || !strings.Contains(err.Error(), "TaskTimeout (20s)") || !strings.Contains(err.Error(), f.Env.Brokers[0]) {
			t.Errorf("Run returned %v; want an error naming the brokers and TaskTimeout", err)
		}
		if d := time.Since(killed); d < cfg.TaskTimeout {
			t.Errorf("Run returned %v after the broker went, before TaskTimeout", d)
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("Run did not return within 3m of the broker going, with a TaskTimeout of 20s")
	}
	f.Node(t, 1, "start")
	feed.stop(t)
}

// mustRegistry is an empty view registry.
func mustRegistry(t *testing.T) *projection.Registry {
	t.Helper()
	reg, err := projection.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	return reg
}
