package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
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

// member is one instance with its HTTP server.
type member struct {
	app *engine.App
	srv *http.Server
	url string
}

func (m *member) stop(t *testing.T) {
	t.Helper()
	_ = m.srv.Close()
	if err := m.app.Close(); err != nil {
		t.Errorf("instance %s: %v", m.app.ID(), err)
	}
}

// Three instances share a table's partitions; every key read sent to one
// of them is answered right, whoever owns the key; after an instance
// leaves, the same reads succeed again once the group has rebalanced.
func TestRoutingAcrossInstances(t *testing.T) {
	kafkaenv.Real(t)
	if testing.Short() {
		t.Skip("three instances and a rebalance; not with -short")
	}
	env, topic, top, cl := kvTable(t, "http-routing", 6)
	const keys = 300
	var recs []*kgo.Record
	for i := range keys {
		v, _ := serde.Int64.Encode(int64(i))
		recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, "k%03d", i), Value: v})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	view, err := projection.NewKeyValue("kv", "kv", serde.String, serde.Int64)
	if err != nil {
		t.Fatal(err)
	}
	views, err := projection.NewRegistry(view)
	if err != nil {
		t.Fatal(err)
	}
	var members []*member
	for i := range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		a := enginetest.StartApp(t, top, engine.Config{AppID: topic, Brokers: env.Brokers, InstanceID: fmt.Sprintf("i%d", i),
			AdvertisedAddr: ln.Addr().String(), SessionTimeout: 6 * time.Second})
		h, err := httpapi.New(httpapi.Config{Instance: a, Views: views})
		if err != nil {
			t.Fatal(err)
		}
		m := &member{app: a, srv: &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}, url: "http://" + ln.Addr().String()}
		go func() { _ = m.srv.Serve(ln) }()
		members = append(members, m)
	}
	defer func() {
		for _, m := range members {
			if m != nil {
				m.stop(t)
			}
		}
	}()

	// readAll reads every key through the first instance until one pass
	// answers them all right; it returns how many answers came from
	// another instance.
	readAll := func(what string) int {
		t.Helper()
		forwarded := 0
		await.NoError(t, 90*time.Second, what, func() error {
			forwarded = 0
			for i := range keys {
				resp, err := http.Get(fmt.Sprintf("%s/views/kv/keys/k%03d", members[0].url, i))
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				want := `{"key":"k` + fmt.Sprintf("%03d", i) + `","value":` + strconv.Itoa(i) + `}`
				if resp.StatusCode != 200 || strings.TrimSpace(string(body)) != want {
					return fmt.Errorf("k%03d: %d %s", i, resp.StatusCode, body)
				}
				if by := resp.Header.Get("Oxbow-Served-By"); by != "" && by != members[0].app.ID() {
					forwarded++
				}
			}
			return nil
		})
		return forwarded
	}
	if n := readAll("three instances"); n == 0 {
		t.Error("no read was forwarded: the first instance owns every partition?")
	} else {
		t.Logf("three instances: %d of %d reads forwarded", n, keys)
	}
	// A scan through one instance, 64 entries a page, gathers every key,
	// in order.
	var scanned []string
	path := "/views/kv/entries?limit=64"
	for {
		resp, err := http.Get(members[0].url + path)
		if err != nil {
			t.Fatal(err)
		}
		var page httpapi.Page
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("scan %s: %d %v", path, resp.StatusCode, err)
		}
		for _, e := range page.Entries {
			scanned = append(scanned, fmt.Sprint(e.Key, "=", e.Value))
		}
		if page.Next == "" {
			break
		}
		path = "/views/kv/entries?limit=64&cursor=" + url.QueryEscape(page.Next)
	}
	var want []string
	for i := range keys {
		want = append(want, fmt.Sprintf("k%03d=%d", i, i))
	}
	if !slices.Equal(scanned, want) {
		t.Errorf("the scan gathered %d entries: %v…", len(scanned), scanned[:min(len(scanned), 5)])
	}
	members[2].stop(t)
	members[2] = nil
	n := readAll("after an instance left")
	t.Logf("two instances: %d of %d reads forwarded", n, keys)
}
