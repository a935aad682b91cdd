package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
	"github.com/oxbow-dev/oxbow/httpapi"
	"github.com/oxbow-dev/oxbow/internal/await"
	"github.com/oxbow-dev/oxbow/internal/fixtures/inventory"
	"github.com/oxbow-dev/oxbow/versions"
)

// The README's walkthrough of versions, played with the programs a user
// runs — the store's and the oxbow tool's binaries — on real Kafka: v1
// sells for a while; v2 starts in a second process, computes its views
// from the events (deciding no command again) and catches up, as oxbow lag
// and /status show; both are read through v1's process (Oxbow-Version);
// oxbow promote switches v1's process to v2's answers, a change feed and a
// read of one's own write included; oxbow rollback switches back; v1
// stops, and oxbow reset (a dry run) and oxbow retire remove its group,
// topics and state while v2 goes on. Every command of the tool is run.
func TestVersionsWalkthrough(t *testing.T) {
	env := kafkaenv.Real(t)
	bin := t.TempDir()
	for _, b := range []struct{ out, pkg string }{{"shoestore", "."}, {"oxbow", "../../cmd/oxbow"}} {
		if out, err := exec.Command("go", "build", "-o", filepath.Join(bin, b.out), b.pkg).CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", b.pkg, err, out)
		}
	}
	name := fmt.Sprintf("walk%d", time.Now().UnixNano()%1_000_000_000)
	dropApp(t, env.Brokers, name)
	brokers := strings.Join(env.Brokers, ",")
	// runOxbow runs the tool: its output, its error output and its exit
	// code. It is killed if it still runs when the test ends.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	runOxbow := func(args ...string) (string, string, int) {
		cmd := exec.CommandContext(ctx, filepath.Join(bin, "oxbow"), append(args, "--brokers", brokers)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, _ := cmd.Output()
		return string(out), stderr.String(), cmd.ProcessState.ExitCode()
	}
	oxbow := func(want int, args ...string) string {
		t.Helper()
		out, stderr, code := runOxbow(args...)
		if code != want {
			t.Fatalf("oxbow %s: exit %d, want %d\n%s%s", strings.Join(args, " "), code, want, out, stderr)
		}
		return out
	}
	state1, state2 := t.TempDir(), t.TempDir()

	// Terminal 1: v1 sells for a while.
	v1 := startProgram(t, filepath.Join(bin, "shoestore"), "-name", name, "-brokers", brokers, "-services", "store",
		"-addr", "127.0.0.1:0", "-state-dir", state1)
	s1 := &store{t: t, url: v1.url, name: name}
	prices := map[string]int64{"red": 6000, "blue": 5500, "green": 7000}
	const shipped, sold, returned = 40, 30, 5
	var wg sync.WaitGroup
	for shoe := range prices {
		wg.Go(func() {
			s1.command(shoe, fmt.Sprintf(`{"type":"ReceiveShipment","data":{"quantity":%d,"unitCost":2000}}`, shipped), 200)
			for i := range sold {
				s1.command(shoe, `{"type":"SellPair","data":{}}`, 200)
				if i%6 == 5 {
					s1.command(shoe, `{"type":"AcceptReturn","data":{"reason":"too small"}}`, 200)
				}
			}
		})
	}
	wg.Wait()
	// And a long history before them, for v2's catch-up to take a while:
	// sales of archived shoes no command touches, written to the events'
	// topic at once (as the decider would have over the years).
	const archived, archivePrice = 600_000, 100
	inv, err := inventory.New(name + "-inventory")
	if err != nil {
		t.Fatal(err)
	}
	_, eventsTopic, _ := inv.Topics()
	sale, err := inv.EventSerde().Encode(inventory.PairSold{Price: archivePrice})
	if err != nil {
		t.Fatal(err)
	}
	history, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...), kgo.DefaultProduceTopic(eventsTopic), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	recs := make([]*kgo.Record, archived)
	for i := range recs {
		recs[i] = &kgo.Record{Key: fmt.Appendf(nil, "archived-%03d", i%500), Value: sale}
	}
	if err := history.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	history.Close()
	var all int64
	for _, p := range prices {
		all += p
	}
	tillV1 := fmt.Sprintf(`{"key":"till","value":{"revenueCents":%d,"transactions":%d,"sales":%d,"returns":%d}}`,
		(sold-returned)*all+archived*archivePrice, 3*(sold+returned)+archived, 3*sold+archived, 3*returned)
	s1.await("/views/till/keys/till", tillV1)
	var listed struct {
		Active   string `json:"active"`
		Versions []struct {
			Version string `json:"version"`
			Active  bool   `json:"active"`
		} `json:"versions"`
	}
	if err := json.Unmarshal([]byte(oxbow(0, "versions", "--app", name, "--json")), &listed); err != nil || listed.Active != "v1" || len(listed.Versions) != 1 {
		t.Fatalf("oxbow versions with v1 alone: %+v, %v", listed, err)
	}

	// What the decider has written, which v2 must not add to.
	_, _, replies := inv.Topics()
	topics := []string{eventsTopic, replies}
	ends := func() map[string]int64 {
		t.Helper()
		cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		listed, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), topics...)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		listed.Each(func(o kadm.ListedOffset) { out[o.Topic] += o.Offset })
		return out
	}
	before := ends()

	// Terminal 2: v2 starts beside it, and catches up; terminal 3 follows
	// its progress, with the rate and the time left, from the moment it
	// has registered (before it runs).
	watched := make(chan [3]string, 1)
	go func() {
		_ = await.Within(5*time.Minute, func() error {
			if out, _, _ := runOxbow("versions", "--app", name, "--json"); !strings.Contains(out, `"v2"`) && ctx.Err() == nil {
				return errors.New("v2 has not registered")
			}
			return nil
		})
		out, stderr, code := runOxbow("lag", "--app", name, "--version", "v2", "--watch", "--interval", "250ms")
		watched <- [3]string{out, stderr, fmt.Sprint(code)}
	}()
	v2 := startProgram(t, filepath.Join(bin, "shoestore"), "-name", name, "-brokers", brokers, "-services", "store",
		"-version", "v2", "-addr", "127.0.0.1:0", "-state-dir", state2)
	select {
	case w := <-watched:
		if out := w[0]; w[2] != "0" || !strings.Contains(out, name+" v2 [") || !strings.Contains(out, "records/s  ETA ") || !strings.Contains(out, "100.0%  lag 0") {
			t.Errorf("oxbow lag --watch: exit %s\n%s%s", w[2], out, w[1])
		} else {
			t.Logf("oxbow lag --watch:\n%s", out)
		}
		// A rate is at most the whole history read in one interval.
		for line := range strings.Lines(w[0]) {
			before, _, ok := strings.Cut(line, " records/s")
			if !ok {
				continue
			}
			var rate float64
			if _, err := fmt.Sscan(before[strings.LastIndexByte(before, ' ')+1:], &rate); err != nil || rate > 4*(archived+3000) {
				t.Errorf("oxbow lag --watch: a rate of %v records/s (%v): %s", rate, err, line)
			}
		}
	case <-time.After(5 * time.Minute):
		t.Fatal("oxbow lag --watch: v2 has not caught up within 5 minutes")
	}
	if out := oxbow(0, "lag", "--app", name, "--version", "v2"); !strings.Contains(out, eventsTopic) {
		t.Errorf("oxbow lag: %s", out)
	}
	if after := ends(); !maps.Equal(after, before) {
		t.Errorf("v2 wrote to the decider's topics: %v, before %v", after, before)
	}
	// Both read through v1's process; v2's till has the money apart, and
	// the view revenue, which v1 has not.
	tillV2 := fmt.Sprintf(`{"key":"till","value":{"revenueCents":%d,"transactions":%d,"sales":%d,"returns":%d,"salesCents":%d,"refundCents":%d}}`,
		(sold-returned)*all+archived*archivePrice, 3*(sold+returned)+archived, 3*sold+archived, 3*returned, sold*all+archived*archivePrice, returned*all)
	awaitAs(t, v1.url+"/views/till/keys/till", "", "v1", tillV1)
	awaitAs(t, v1.url+"/views/till/keys/till", "v2", "v2", tillV2)
	awaitAs(t, v2.url+"/views/till/keys/till", "", "v1", tillV1)
	redV2 := fmt.Sprintf(`{"key":"red","value":{"sold":%d,"returned":%d,"salesCents":%d,"refundCents":%d,"revenueCents":%d}}`,
		sold, returned, sold*prices["red"], returned*prices["red"], (sold-returned)*prices["red"])
	awaitAs(t, v1.url+"/views/revenue/keys/red", "v2", "v2", redV2)
	if code, _, _ := readAs(t, v1.url+"/views/revenue/keys/red", ""); code != 404 {
		t.Errorf("v1's revenue view: %d, want 404", code)
	}
	// v2's /status, through v1's process: its own lag, none left.
	var st httpapi.Status
	if err := json.Unmarshal([]byte(awaitAs(t, v1.url+"/status", "v2", "v2", "")), &st); err != nil || st.Version != "v2" || st.Lag == nil {
		t.Errorf("v2's /status: %+v, %v", st, err)
	}

	// Promoted: v1's process answers v2's, a change feed and a read of
	// one's own write included.
	if out := oxbow(0, "promote", "--app", name, "--version", "v2"); !strings.Contains(out, "v2 is active") {
		t.Errorf("oxbow promote: %s", out)
	}
	awaitAs(t, v1.url+"/views/till/keys/till", "", "v2", tillV2)
	if out := oxbow(0, "describe", "--url", v1.url); !strings.Contains(out, "revenue") {
		t.Errorf("oxbow describe, v2 active: %s", out)
	}
	feed := openChanges(t, v1.url+"/views/till/changes")
	outcome := s1.command("red", `{"type":"SellPair","data":{}}`, 200)
	var o struct {
		Events []struct {
			Topic     string `json:"topic"`
			Partition int32  `json:"partition"`
			Offset    int64  `json:"offset"`
		} `json:"events"`
	}
	if err := json.Unmarshal([]byte(outcome), &o); err != nil || len(o.Events) != 1 {
		t.Fatalf("the sale's outcome: %s", outcome)
	}
	e := o.Events[0]
	// The read waits until v2's view has the sale, in another process.
	code, served, body := readAs(t, fmt.Sprintf("%s/views/revenue/keys/red?minPosition=%s:%d:%d", v1.url, e.Topic, e.Partition, e.Offset), "")
	if code != 200 || served != "v2" || !strings.Contains(body, fmt.Sprintf(`"sold":%d,`, sold+1)) {
		t.Errorf("reading the sale's revenue at once: %d from %s: %s", code, served, body)
	}
	if got := feed.until(t, fmt.Sprintf(`"sales":%d,`, 3*sold+archived+1)); !strings.Contains(got, `"salesCents":`) {
		t.Errorf("the change feed's till is not v2's: %s", got)
	}

	// Rolled back: v1's answers again, with the sale.
	if out := oxbow(0, "rollback", "--app", name); !strings.Contains(out, "v1 is active") {
		t.Errorf("oxbow rollback: %s", out)
	}
	awaitAs(t, v2.url+"/views/till/keys/till", "", "v1", fmt.Sprintf(`{"key":"till","value":{"revenueCents":%d,"transactions":%d,"sales":%d,"returns":%d}}`,
		(sold-returned)*all+archived*archivePrice+prices["red"], 3*(sold+returned)+archived+1, 3*sold+archived+1, 3*returned))

	// v2 again; v1 stops and is retired.
	oxbow(0, "promote", "--app", name, "--version", "v2")
	awaitAs(t, v1.url+"/views/till/keys/till", "", "v2", "")
	oxbow(1, "retire", "--app", name, "--version", "v2", "--yes") // the active one
	v1.stop(t)
	if out := oxbow(0, "reset", "--app", name, "--version", "v1", "--dry-run", "--state-dir", state1); !strings.Contains(out, "would be reset") ||
		!strings.Contains(out, name+"-v1-") || !strings.Contains(out, "offset") {
		t.Errorf("oxbow reset --dry-run: %s", out)
	}
	out := oxbow(0, "retire", "--app", name, "--version", "v1", "--yes", "--state-dir", state1)
	if !strings.Contains(out, ": deleted") || !strings.Contains(out, "till-changelog") || !strings.Contains(out, filepath.Join(state1, name+"-v1")) {
		t.Errorf("oxbow retire: %s", out)
	}
	if _, err := os.Stat(filepath.Join(state1, name+"-v1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("v1's state is still there: %v", err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	await.NoError(t, time.Minute, "v1's topics and group are gone", func() error {
		td, err := adm.ListTopics(context.Background())
		if err != nil {
			return err
		}
		if left := slices.DeleteFunc(td.Names(), func(n string) bool { return !strings.HasPrefix(n, name+"-v1-") }); len(left) > 0 {
			return fmt.Errorf("topics left: %v", left)
		}
		groups, err := adm.ListGroups(context.Background())
		if err != nil {
			return err
		}
		if slices.Contains(groups.Groups(), versions.Group(name, "v1")) {
			return errors.New("v1's group is still there")
		}
		return nil
	})
	if err := json.Unmarshal([]byte(oxbow(0, "versions", "--app", name, "--json")), &listed); err != nil || listed.Active != "v2" ||
		len(listed.Versions) != 1 || listed.Versions[0].Version != "v2" {
		t.Errorf("oxbow versions after v1's retirement: %+v, %v", listed, err)
	}
	// v2 goes on alone: it decides commands now, and its views follow.
	s2 := &store{t: t, url: v2.url, name: name}
	s2.command("blue", `{"type":"SellPair","data":{}}`, 200)
	s2.await("/views/revenue/keys/blue", fmt.Sprintf(`{"key":"blue","value":{"sold":%d,"returned":%d,"salesCents":%d,"refundCents":%d,"revenueCents":%d}}`,
		sold+1, returned, (sold+1)*prices["blue"], returned*prices["blue"], (sold+1-returned)*prices["blue"]))
	v2.stop(t)
}

// dropApp deletes the topics and consumer groups of the application name
// when the test ends, and also when SIGINT or SIGTERM ends it before its
// cleanups run: each walkthrough has a name of its own (none begins with
// another's and a separator), and a broker kept between runs would
// collect them otherwise.
func dropApp(t *testing.T, brokers []string, name string) {
	drop := sync.OnceFunc(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
		if err != nil {
			t.Logf("drop %s's topics: %v", name, err)
			return
		}
		defer cl.Close()
		adm := kadm.NewClient(cl)
		// Its topics and groups, and its change feed's (name.schema.table).
		other := func(n string) bool { return !strings.HasPrefix(n, name+"-") && !strings.HasPrefix(n, name+".") }
		var errs []error
		if groups, err := adm.ListGroups(ctx); err != nil {
			errs = append(errs, err)
		} else if gs := slices.DeleteFunc(groups.Groups(), other); len(gs) > 0 {
			_, err := adm.DeleteGroups(ctx, gs...)
			errs = append(errs, err)
		}
		if td, err := adm.ListTopics(ctx); err != nil {
			errs = append(errs, err)
		} else if ts := slices.DeleteFunc(td.Names(), other); len(ts) > 0 {
			resp, err := adm.DeleteTopics(ctx, ts...)
			errs = append(errs, err, resp.Error())
		}
		if err := errors.Join(errs...); err != nil {
			t.Logf("drop %s's topics and groups: %v", name, err)
		}
	})
	sigs := make(chan os.Signal, 1)
	// Not a signal the process was started to ignore (SIGINT in a
	// background job): raised again below, it would be ignored again.
	var watch []os.Signal
	for _, sig := range []os.Signal{os.Interrupt, syscall.SIGTERM} {
		if !signal.Ignored(sig) {
			watch = append(watch, sig)
		}
	}
	if len(watch) > 0 {
		signal.Notify(sigs, watch...)
	}
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-sigs:
			killRunning()
			drop()
			// Then the signal's own end.
			signal.Stop(sigs)
			_ = syscall.Kill(os.Getpid(), sig.(syscall.Signal))
		case <-done:
		}
	}()
	t.Cleanup(func() {
		signal.Stop(sigs)
		close(done)
		drop()
	})
}

// readAs reads url, asking for version if set; it returns the status,
// the version that served it and the body (compacted if JSON).
func readAs(t *testing.T, url, version string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if version != "" {
		req.Header.Set(httpapi.VersionHeader, version)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var c bytes.Buffer
	if json.Compact(&c, b) == nil {
		b = c.Bytes()
	}
	return resp.StatusCode, resp.Header.Get(httpapi.VersionHeader), string(b)
}

// awaitAs reads url as readAs does until version served it with 200 and
// want (any body if want is ""); it returns the body.
func awaitAs(t *testing.T, url, version, served, want string) string {
	t.Helper()
	var body string
	await.NoError(t, time.Minute, fmt.Sprintf("GET %s (%s) from %s: %s", url, version, served, want), func() error {
		code, by, b := readAs(t, url, version)
		body = b
		if code != 200 || by != served || (want != "" && b != want) {
			return fmt.Errorf("%d from %q: %s", code, by, b)
		}
		return nil
	})
	return body
}

// changes is a change feed being read.
type changes struct {
	events chan string
}

// openChanges opens a change feed and reads its events' data until the
// test ends.
func openChanges(t *testing.T, url string) *changes {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	c := &changes{events: make(chan string, 1000)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(c.events)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				c.events <- d
			}
		}
	}()
	t.Cleanup(func() { cancel(); resp.Body.Close(); <-done })
	return c
}

// until returns the first event whose data has want (a minute at most).
func (c *changes) until(t *testing.T, want string) string {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case d, ok := <-c.events:
			if !ok {
				t.Fatalf("the change feed ended before %s", want)
			}
			if strings.Contains(d, want) {
				return d
			}
		case <-timeout:
			t.Fatalf("no change with %s within a minute", want)
		}
	}
}

// startProgram runs the store's binary with args and waits until it
// says where it serves.
func startProgram(t *testing.T, path string, args ...string) *child {
	t.Helper()
	return startChild(t, "store", exec.Command(path, args...), func(line string) (string, bool) {
		if !strings.HasPrefix(line, "The shoe store ") {
			return "", false
		}
		_, u, ok := strings.Cut(line, " serves ")
		return u, ok
	})
}
