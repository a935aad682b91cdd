package versions_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/httpapi"
	"github.com/oxbow-dev/oxbow/internal/await"
	"github.com/oxbow-dev/oxbow/projection"
	"github.com/oxbow-dev/oxbow/versions"
)

// totals is a projection of orders (customer → amount) into the store
// "totals": version 1 counts a customer's orders, version 2 — the logic
// changed — sums their amounts.
func totals(t testing.TB, topic, version string) *engine.Topology {
	b := engine.NewBuilder()
	grouped := engine.NewStream(b, topic, serde.String, serde.Int64).GroupByKey()
	switch version {
	case "v1":
		grouped.Count(engine.Materialized("totals"))
	default:
		grouped.Reduce(func(a, v int64) int64 { return a + v }, engine.Materialized("totals"))
	}
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return top
}

// instance is a process of the application: an HTTP server that serves
// every version it runs, the active one by default.
type instance struct {
	id      string
	ln      net.Listener
	srv     *http.Server
	apps    map[string]*engine.App
	handler atomic.Pointer[httpapi.Handler] // swapped as versions come and go
}

// The scenario of reprocessing, on a real broker: version 1 of a
// projection serves; version 2, with changed logic, catches up beside it
// while version 1 keeps serving; promoted, every read from every instance
// answers version 2's; rolled back, version 1's; version 1 retired, its
// group, topics and state are gone and version 2 goes on.
func TestReprocessing(t *testing.T) {
	env := kafkaenv.Real(t)
	ctx := context.Background()
	app := fmt.Sprintf("shop%d", time.Now().UnixNano())
	topic := app + "-orders"
	env.CreateTopics(t, 4, topic)
	ctl, err := versions.New(env.Brokers, versions.Options{Topic: app + "-control"})
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// 40 customers; customer c has c+1 orders of 10 each: count c+1, sum 10(c+1).
	const customers = 40
	produce := func(round int) {
		var recs []*kgo.Record
		for c := range customers {
			for range c + 1 {
				v, _ := serde.Int64.Encode(10)
				recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, "c%02d", c), Value: v})
			}
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
	produce(1)

	watcher := ctl.Watcher()
	wctx, stopWatch := context.WithCancel(ctx)
	watchDone := make(chan error, 1)
	go func() { watchDone <- watcher.Run(wctx) }()
	defer func() {
		stopWatch()
		if err := <-watchDone; err != nil {
			t.Errorf("watcher: %v", err)
		}
	}()

	view, err := projection.NewKeyValue("totals", "totals", serde.String, serde.Int64)
	if err != nil {
		t.Fatal(err)
	}
	views, err := projection.NewRegistry(view)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	var instances []*instance
	for i := range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		in := &instance{id: fmt.Sprintf("i%d", i), ln: ln, apps: map[string]*engine.App{}}
		in.srv = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			in.handler.Load().ServeHTTP(w, r)
		})}
		instances = append(instances, in)
	}
	// Makes the instances' HTTP servers serve the versions they run.
	serve := func() {
		for _, in := range instances {
			served := map[string]httpapi.Served{}
			for v, a := range in.apps {
				served[v] = httpapi.Served{Instance: a, Views: views}
			}
			h, err := httpapi.New(httpapi.Config{Versions: served, Active: func() string { return watcher.Active(app) }})
			if err != nil {
				t.Fatal(err)
			}
			if old := in.handler.Swap(h); old != nil {
				old.Close()
			} else {
				go func() { _ = in.srv.Serve(in.ln) }()
			}
		}
	}
	defer func() {
		for _, in := range instances {
			_ = in.srv.Close()
			if h := in.handler.Load(); h != nil {
				h.Close()
			}
		}
	}()
	start := func(version string) {
		top := totals(t, topic, version)
		for _, in := range instances {
			a := enginetest.StartApp(t, top, engine.Config{AppID: app, Version: version, Brokers: env.Brokers, InstanceID: in.id,
				StateDir: filepath.Join(root, versions.Group(app, version), in.id), AdvertisedAddr: in.ln.Addr().String(),
				Guarantee: engine.ExactlyOnce, SessionTimeout: 6 * time.Second, LeaveGroupOnClose: true})
			if err := ctl.RegisterApp(ctx, a, top); err != nil {
				t.Fatal(err)
			}
			in.apps[version] = a
		}
		serve()
	}
	want := func(version string) map[string]int64 {
		out := map[string]int64{}
		for c := range customers {
			if version == "v1" {
				out[fmt.Sprintf("c%02d", c)] = int64(c + 1)
			} else {
				out[fmt.Sprintf("c%02d", c)] = int64(10 * (c + 1))
			}
		}
		return out
	}
	// Every key read through every instance answers version's values.
	readsAre := func(version string, vals map[string]int64) error {
		for _, in := range instances {
			for k, wantV := range vals {
				got, served, err := read(in, k, "")
				if err != nil {
					return fmt.Errorf("%s %s: %w", in.id, k, err)
				}
				if served != version || got != wantV {
					return fmt.Errorf("%s %s: %d from %s, want %d from %s", in.id, k, got, served, wantV, version)
				}
			}
		}
		return nil
	}
	const settle = 90 * time.Second // how long each step below may take
	lagOf := func(version string) func() error {
		return func() error {
			l, err := ctl.Lag(ctx, app, version)
			if err != nil {
				return err
			}
			if !l.CaughtUp(0) {
				return fmt.Errorf("%s is %d behind", version, l.Total)
			}
			return nil
		}
	}

	// Version 1 serves.
	start("v1")
	await.NoError(t, settle, "v1 catches up", lagOf("v1"))
	// The first version is promoted by the first to ask; no other after.
	if ok, err := ctl.PromoteIfNone(ctx, app, "v1"); !ok || err != nil {
		t.Fatalf("v1, first: promoted %v, %v", ok, err)
	}
	// Its instances, as a process that runs no version finds them.
	await.NoError(t, settle, "v1's instances", func() error {
		ins, err := ctl.Instances(ctx, app, "v1")
		if err != nil {
			return err
		}
		var got []string
		for _, in := range ins {
			got = append(got, in.ID+"@"+in.Addr)
		}
		want := []string{"i0@" + instances[0].ln.Addr().String(), "i1@" + instances[1].ln.Addr().String()}
		if !slices.Equal(got, want) {
			return fmt.Errorf("instances %v, want %v", got, want)
		}
		return nil
	})
	if _, err := ctl.Instances(ctx, app, "v9"); err == nil || !strings.Contains(err.Error(), "no version") {
		t.Errorf("the instances of an unregistered version: %v", err)
	}
	await.NoError(t, settle, "v1 serves", func() error { return readsAre("v1", want("v1")) })

	// Version 2 starts and catches up beside it; v1 keeps serving.
	start("v2")
	if ok, err := ctl.PromoteIfNone(ctx, app, "v2"); ok || err != nil {
		t.Fatalf("v2, second: promoted %v, %v", ok, err)
	}
	if err := readsAre("v1", want("v1")); err != nil {
		t.Fatalf("while v2 catches up: %v", err)
	}
	await.NoError(t, settle, "v2 catches up", lagOf("v2"))
	if err := readsAre("v1", want("v1")); err != nil {
		t.Fatalf("v2 caught up, before its promotion: %v", err)
	}
	// A read may ask for a version.
	if got, served, err := read(instances[0], "c03", "v2"); err != nil || served != "v2" || got != 40 {
		t.Errorf("c03 from v2 asked for: %d from %s, %v", got, served, err)
	}

	// Promoted: every instance answers v2's, every key, within seconds.
	if err := ctl.Promote(ctx, app, "v2", versions.PromoteOptions{}); err != nil {
		t.Fatal(err)
	}
	await.NoError(t, settle, "v2 serves", func() error { return readsAre("v2", want("v2")) })

	// Rolled back: v1's.
	if v, err := ctl.Rollback(ctx, app); err != nil || v != "v1" {
		t.Fatalf("rollback: %s, %v", v, err)
	}
	await.NoError(t, settle, "v1 serves again", func() error { return readsAre("v1", want("v1")) })
	if err := ctl.Promote(ctx, app, "v2", versions.PromoteOptions{}); err != nil {
		t.Fatal(err)
	}
	await.NoError(t, settle, "v2 serves again", func() error { return readsAre("v2", want("v2")) })

	// The active version cannot be retired, nor a running one.
	if _, err := ctl.Retire(ctx, app, "v2", versions.RetireOptions{}); err == nil || !strings.Contains(err.Error(), "active") {
		t.Errorf("retiring the active version: %v", err)
	}
	if _, err := ctl.Retire(ctx, app, "v1", versions.RetireOptions{StateRoots: []string{root}}); err == nil || !strings.Contains(err.Error(), "running") {
		t.Errorf("retiring a running version: %v", err)
	}
	// Version 1 stops and is retired.
	for _, in := range instances {
		if err := in.apps["v1"].Close(); err != nil {
			t.Fatal(err)
		}
		delete(in.apps, "v1")
	}
	serve()
	adm := kadm.NewClient(cl)
	v1Topics := topicsOf(t, adm, versions.Group(app, "v1")+"-")
	if len(v1Topics) == 0 {
		t.Fatal("v1 has no internal topics to retire")
	}
	await.NoError(t, settle, "v1's instances have left", func() error {
		_, err := ctl.Retire(ctx, app, "v1", versions.RetireOptions{DryRun: true, StateRoots: []string{root}})
		return err
	})
	plan, err := ctl.Retire(ctx, app, "v1", versions.RetireOptions{StateRoots: []string{root}})
	if err != nil {
		t.Fatal(err)
	}
	if !plan.Done || !slices.Equal(plan.Topics, v1Topics) || len(plan.Dirs) != 1 {
		t.Errorf("retired %+v; v1's topics %v", plan, v1Topics)
	}
	await.NoError(t, settle, "v1's topics are gone", func() error {
		if left := topicsOf(t, adm, versions.Group(app, "v1")+"-"); len(left) > 0 {
			return fmt.Errorf("left: %v", left)
		}
		return nil
	})
	groups, err := adm.ListGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(groups.Groups(), versions.Group(app, "v1")) {
		t.Error("v1's group is still there")
	}
	if _, err := os.Stat(filepath.Join(root, versions.Group(app, "v1"))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("v1's state: %v", err)
	}
	a, err := ctl.App(ctx, app)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := a.Versions["v1"]; ok || a.Active != "v2" {
		t.Errorf("after retiring v1: %+v", a)
	}
	// Version 2 goes on: new orders reach its answers.
	if len(topicsOf(t, adm, versions.Group(app, "v2")+"-")) == 0 {
		t.Error("v2's topics went with v1's")
	}
	produce(2)
	w2 := want("v2")
	for k := range w2 {
		w2[k] *= 2
	}
	await.NoError(t, settle, "v2 after v1's retirement", func() error { return readsAre("v2", w2) })
}

// read reads a key of the totals view through an instance; version, if
// set, asks for that version.
func read(in *instance, key, version string) (int64, string, error) {
	req, err := http.NewRequest(http.MethodGet, "http://"+in.ln.Addr().String()+"/views/totals/keys/"+key, nil)
	if err != nil {
		return 0, "", err
	}
	if version != "" {
		req.Header.Set(httpapi.VersionHeader, version)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, resp.Header.Get(httpapi.VersionHeader), fmt.Errorf("status %s", resp.Status)
	}
	var e struct {
		Value int64 `json:"value"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		return 0, "", err
	}
	return e.Value, resp.Header.Get(httpapi.VersionHeader), nil
}

func topicsOf(t *testing.T, adm *kadm.Client, prefix string) []string {
	t.Helper()
	td, err := adm.ListTopics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range td.Names() {
		if strings.HasPrefix(n, prefix) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// A version that has not caught up is not promoted unless forced; a reset
// makes a stopped version process its inputs again from the start, to the
// same answers (its state and internal topics go, so nothing counts
// twice); a running version is not reset.
func TestPromoteRefusedAndReset(t *testing.T) {
	env := kafkaenv.Real(t)
	ctx := context.Background()
	app := fmt.Sprintf("reset%d", time.Now().UnixNano())
	topic := app + "-orders"
	env.CreateTopics(t, 2, topic)
	ctl, err := versions.New(env.Brokers, versions.Options{Topic: app + "-control"})
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for i := range 300 {
		v, _ := serde.Int64.Encode(int64(i))
		recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i%7), Value: v})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	top := totals(t, topic, "v2")
	if err := ctl.Register(ctx, app, "v2", top.SourceTopics()); err != nil {
		t.Fatal(err)
	}
	if err := ctl.Promote(ctx, app, "nope", versions.PromoteOptions{}); err == nil || !strings.Contains(err.Error(), `no version "nope"`) {
		t.Errorf("promoting an unknown version: %v", err)
	}
	var nc *versions.NotCaughtUpError
	if err := ctl.Promote(ctx, app, "v2", versions.PromoteOptions{}); !errors.As(err, &nc) || nc.Lag.Total != 300 {
		t.Fatalf("promoting a version that has read nothing: %v", err)
	}
	if err := ctl.Promote(ctx, app, "v2", versions.PromoteOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if a, err := ctl.App(ctx, app); err != nil || a.Active != "v2" || !a.Forced {
		t.Fatalf("after a forced promotion: %+v, %v", a, err)
	}

	root := t.TempDir()
	sums := func() map[string]int64 {
		t.Helper()
		stateDir := filepath.Join(root, versions.Group(app, "v2"), "i0")
		a, err := engine.NewApp(top, engine.Config{AppID: app, Version: "v2", Brokers: env.Brokers, StateDir: stateDir, Guarantee: engine.ExactlyOnce, Batch: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Run(ctx); err != nil {
			t.Fatal(err)
		}
		return storeSums(t, top, app, env, stateDir)
	}
	first := sums()
	want := map[string]int64{}
	for i := range 300 {
		want[fmt.Sprintf("k%d", i%7)] += int64(i)
	}
	if !equal(first, want) {
		t.Fatalf("the first run: %v, want %v", first, want)
	}
	if l, err := ctl.Lag(ctx, app, "v2"); err != nil || !l.CaughtUp(0) {
		t.Fatalf("lag after the batch: %+v, %v", l, err)
	}

	plan, err := ctl.Reset(ctx, app, "v2", versions.ResetOptions{DryRun: true, StateRoots: []string{root}})
	if err != nil {
		t.Fatal(err)
	}
	if plan.Done || len(plan.Offsets) != 2 || plan.Offsets[0].Committed != 0 || len(plan.Topics) == 0 || len(plan.Dirs) != 1 {
		t.Fatalf("the dry run's plan: %+v", plan)
	}
	if l, err := ctl.Lag(ctx, app, "v2"); err != nil || l.Total != 0 {
		t.Fatalf("a dry run changed the offsets: %+v, %v", l, err)
	}
	if plan, err = ctl.Reset(ctx, app, "v2", versions.ResetOptions{StateRoots: []string{root}}); err != nil || !plan.Done {
		t.Fatalf("reset: %+v, %v", plan, err)
	}
	if l, err := ctl.Lag(ctx, app, "v2"); err != nil || l.Total != 300 {
		t.Fatalf("lag after the reset: %+v, %v", l, err)
	}
	// Every version's at once, as each alone.
	lags, errs, err := ctl.Lags(ctx, app)
	if err != nil || len(errs) != 0 {
		t.Fatalf("Lags: %v %v", err, errs)
	}
	for v, l := range lags {
		if one, err := ctl.Lag(ctx, app, v); err != nil || one.Total != l.Total || one.Group != l.Group || len(one.Partitions) != len(l.Partitions) {
			t.Errorf("Lags' %s %+v, Lag's %+v (%v)", v, l, one, err)
		}
	}
	if l := lags["v2"]; l.Total != 300 {
		t.Errorf("Lags' v2: %+v, want 300 behind", l)
	}
	if again := sums(); !equal(again, want) {
		t.Fatalf("after the reset: %v, want %v (not doubled)", again, want)
	}
	a := enginetest.StartApp(t, top, engine.Config{AppID: app, Version: "v2", Brokers: env.Brokers, StateDir: t.TempDir(), Guarantee: engine.ExactlyOnce})
	if _, err := ctl.Reset(ctx, app, "v2", versions.ResetOptions{DryRun: true}); err == nil || !strings.Contains(err.Error(), "running") {
		t.Errorf("resetting a running version: %v", err)
	}
	_ = a.Close()
}

func equal(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// storeSums reads the totals store as an instance on the state directory
// has it (restored from the changelog where the directory lacks it).
func storeSums(t *testing.T, top *engine.Topology, app string, env *kafkaenv.Env, stateDir string) map[string]int64 {
	t.Helper()
	a := enginetest.StartApp(t, top, engine.Config{AppID: app, Version: "v2", Brokers: env.Brokers, StateDir: stateDir, Guarantee: engine.ExactlyOnce, LeaveGroupOnClose: true})
	defer a.Close()
	st, err := engine.QueryKeyValueStore(a, "totals", serde.String, serde.Int64)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for kv, err := range st.All() {
		if err != nil {
			t.Fatal(err)
		}
		out[kv.Key] = kv.Value
	}
	return out
}
