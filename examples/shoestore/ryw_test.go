package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/aggregate"
	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
	"github.com/oxbow-dev/oxbow/internal/await"
)

// Three instances of the store share the work. Fifty commands go through
// the first; after each, every view derived from its events is read
// through another instance with the outcome's positions (?minPosition=):
// the inventory (fed by the events), the till (behind a repartition and a
// join with the catalog), daily sales and the returns log (behind
// repartitions of their own). Each read must reflect its command at once,
// every time: the expected values are kept here, not read from the store.
func TestShoeStoreReadsItsWritesOnThreeInstances(t *testing.T) {
	env := kafkaenv.ForTest(t)
	name := fmt.Sprintf("ryw%d", time.Now().UnixNano()%1_000_000_000)
	var urls []string
	for i := range 3 {
		urls = append(urls, startStore(t, config{Name: name, Brokers: env.Brokers, InstanceID: fmt.Sprintf("shoestore-%d", i)}).url)
	}
	// Once the group has settled, every instance answers for every key.
	s := &store{t: t, url: urls[0]}
	for _, shoe := range []string{"red", "blue", "green"} {
		s.command(shoe, `{"type":"ReceiveShipment","data":{"quantity":100,"unitCost":3000}}`, 200)
	}
	for _, u := range urls {
		(&store{t: t, url: u}).await("/views/inventory/keys/green", `{"key":"green","value":{"inStock":100,"sold":0,"returned":0}}`)
	}
	awaitSettled(t, http.DefaultClient, urls)

	type stock struct{ InStock, Sold, Returned int64 }
	inv := map[string]*stock{"red": {InStock: 100}, "blue": {InStock: 100}, "green": {InStock: 100}}
	price := map[string]int64{"red": 6000, "blue": 5500, "green": 7000}
	var till Till
	shoes := []string{"red", "blue", "green"}
	rng := rand.New(rand.NewPCG(22, 50))
	retried := 0
	defer func() { t.Logf("%d reads answered 503 first", retried) }()
	for i := range 50 {
		shoe := shoes[rng.IntN(len(shoes))]
		st := inv[shoe]
		ret := st.Sold > st.Returned && rng.IntN(3) == 0
		body := `{"type":"SellPair","data":{}}`
		if ret {
			body = fmt.Sprintf(`{"type":"AcceptReturn","data":{"reason":"return %d"}}`, i)
		}
		var out aggregate.Outcome
		if err := json.Unmarshal([]byte(s.command(shoe, body, 200)), &out); err != nil || out.Status != aggregate.Accepted || len(out.Events) == 0 {
			t.Fatalf("command %d: outcome %+v (%v)", i, out, err)
		}
		till.Transactions++
		if ret {
			st.InStock++
			st.Returned++
			till.Returns++
			till.RevenueCents -= price[shoe]
		} else {
			st.InStock--
			st.Sold++
			till.Sales++
			till.RevenueCents += price[shoe]
		}
		q := url.Values{}
		for _, p := range out.Events {
			q.Add("minPosition", fmt.Sprintf("%s:%d:%d", p.Topic, p.Partition, p.Offset))
		}
		reader := urls[1+i%2]
		// A read answers 200 with what it reflects, or 503 with Retry-After
		// while the position is not reached (the group rebalancing, say):
		// retried as a client would, and counted.
		read := func(path string) string {
			t.Helper()
			var got string
			await.NoError(t, 30*time.Second, fmt.Sprintf("command %d (%s %s): GET %s", i, shoe, body, path), func() error {
				resp, err := http.Get(reader + path + "?" + q.Encode())
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 {
					got = string(b)
					return nil
				}
				if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
					t.Fatalf("command %d (%s %s): GET %s: %d %s", i, shoe, body, path, resp.StatusCode, b)
				}
				retried++
				t.Logf("command %d: GET %s: 503 %s", i, path, b)
				return fmt.Errorf("503 %s", b)
			})
			return got
		}
		var gotInv struct {
			Value struct{ InStock, Sold, Returned int64 } `json:"value"`
		}
		if err := json.Unmarshal([]byte(read("/views/inventory/keys/"+shoe)), &gotInv); err != nil || gotInv.Value != *st {
			t.Errorf("command %d (%s %s): inventory %+v (%v), want %+v", i, shoe, body, gotInv.Value, err, *st)
		}
		var gotTill struct {
			Value Till `json:"value"`
		}
		if err := json.Unmarshal([]byte(read("/views/till/keys/till")), &gotTill); err != nil || gotTill.Value != till {
			t.Errorf("command %d (%s %s): till %+v (%v), want %+v", i, shoe, body, gotTill.Value, err, till)
		}
		if ret {
			var got struct {
				Value Return `json:"value"`
			}
			key := url.PathEscape(fmt.Sprintf("%s/%06d", shoe, out.Version))
			if err := json.Unmarshal([]byte(read("/views/returns/keys/"+key)), &got); err != nil || got.Value.Reason != fmt.Sprintf("return %d", i) || got.Value.Refund != price[shoe] {
				t.Errorf("command %d (%s %s): return %+v (%v)", i, shoe, body, got.Value, err)
			}
			continue
		}
		var daily struct {
			Windows []struct{ Value int64 } `json:"windows"`
		}
		err := json.Unmarshal([]byte(read("/views/daily-sales/keys/"+shoe+"/windows")), &daily)
		sold := int64(0) // over the days the test ran on
		for _, w := range daily.Windows {
			sold += w.Value
		}
		if err != nil || sold != st.Sold {
			t.Errorf("command %d (%s %s): daily sales %+v (%v), want %d sold", i, shoe, body, daily.Windows, err, st.Sold)
		}
	}
}

// awaitSettled waits, asking with hc, until the group has given tasks to
// all the instances and each says it is running.
func awaitSettled(t *testing.T, hc *http.Client, urls []string) {
	t.Helper()
	await.Until(t, 2*time.Minute, "the instances all running with tasks", func() bool {
		for _, u := range urls {
			var st struct {
				State string   `json:"state"`
				Tasks []string `json:"tasks"`
			}
			resp, err := hc.Get(u + "/status")
			if err != nil {
				return false
			}
			err = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
			if err != nil || len(st.Tasks) == 0 || !strings.EqualFold(st.State, "running") {
				return false
			}
		}
		return true
	})
}
