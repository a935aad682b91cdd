package httpapi_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/httpapi"
	"github.com/oxbow-dev/oxbow/internal/browser"
	"github.com/oxbow-dev/oxbow/projection"
	"github.com/oxbow-dev/oxbow/versions"
)

// The console in Chromium, on a secured, versioned application of two
// versions: without a token it asks for one; with one it draws the
// topology with every store and its rates, places every task, and lists
// the versions, caught up; a promotion with a reader's token is refused
// and promotes nothing; with the operator's it promotes, and a rollback
// brings the first version back. No JavaScript error on the way.
func TestConsoleInBrowser(t *testing.T) {
	b := browser.New(t)
	env, topic, top, cl := kvTable(t, "console-browser", 3)
	produce := func(from, n int) {
		t.Helper()
		var recs []*kgo.Record
		for i := from; i < from+n; i++ {
			v, _ := serde.Int64.Encode(int64(i))
			recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, "k%03d", i%50), Value: v})
		}
		if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produce(0, 200)
	control, err := versions.New(env.Brokers, versions.Options{Topic: topic + "-control"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(control.Close)
	view, err := projection.NewKeyValue("kv", "kv", serde.String, serde.Int64)
	if err != nil {
		t.Fatal(err)
	}
	views, err := projection.NewRegistry(view)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]httpapi.Served{}
	for _, v := range []string{"v1", "v2"} {
		a := enginetest.StartApp(t, top, engine.Config{AppID: topic, Version: v, Brokers: env.Brokers, InstanceID: "i-" + v,
			AdvertisedAddr: ln.Addr().String(), SessionTimeout: 6 * time.Second})
		if err := control.RegisterApp(context.Background(), a, top); err != nil {
			t.Fatal(err)
		}
		served[v] = httpapi.Served{Instance: a, Views: views, Topology: top}
	}
	ctx := context.Background()
	if err := control.Promote(ctx, topic, "v1", versions.PromoteOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	active := func() string {
		a, err := control.App(ctx, topic)
		if err != nil {
			return ""
		}
		return a.Active
	}
	h, err := httpapi.New(httpapi.Config{Versions: served, Active: active, VersionControl: control, Brokers: env.Brokers, Console: true,
		Authenticator: httpapi.Tokens(tokens), PeerSecret: []byte(peerSecret)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	base := coServe(t, ln, h)

	// No token: the page says what it needs.
	b.Run(chromedp.Navigate(base + "/console/"))
	b.Until("a request for a token", `document.getElementById("who").textContent.includes("token")`, 30*time.Second)
	b.Until("the topology refused", `!!document.querySelector("#page .banner") && document.querySelector("#page .banner").textContent.includes("Refused")`, 30*time.Second)

	useToken := func(tok string) {
		t.Helper()
		b.Run(chromedp.SetValue(chromedp.ID("token"), tok), chromedp.Click(chromedp.ID("use-token")))
	}
	useToken(adminToken)
	b.Until("the topology drawn with every store", `!!document.querySelector('#topology g.store[data-store="kv"]')`, 30*time.Second)
	for _, n := range top.Graph().SubTopologies[0].Nodes {
		if !browser.Eval[bool](b, fmt.Sprintf(`!!document.querySelector('#topology g.node[data-node=%q]')`, n.Name)) {
			t.Errorf("the graph has no node %s", n.Name)
		}
	}
	// Records arrive: the source's rate shows them.
	src := nodeNamed(t, top, "source")
	b.Until("the source's first rate", fmt.Sprintf(`document.querySelector('g.node[data-node=%q] .rate').textContent !== ""`, src), 30*time.Second)
	produce(200, 300)
	b.Until("the source's count to reach every record", fmt.Sprintf(`document.querySelector('g.node[data-node=%q] .rate').dataset.total === "500"`, src), 60*time.Second)
	b.Screenshot("httpapi-topology")

	// Every task placed on the instance of the active version.
	b.Run(chromedp.Navigate(base + "/console/#/instances"))
	b.Until("three tasks placed", `document.querySelectorAll("#tasks tr[data-task]").length === 3`, 30*time.Second)
	if got := browser.Eval[string](b, `document.querySelector('#tasks tr[data-task="0_2"] td:nth-child(2)').textContent`); got != "i-v1" {
		t.Errorf("task 0_2 is active on %q, want i-v1", got)
	}
	b.Screenshot("httpapi-instances")

	// Versions: both caught up; a reader cannot promote.
	b.Run(chromedp.Navigate(base + "/console/#/versions"))
	b.Until("both versions caught up", `document.querySelectorAll("#versions .badge.good").length === 3`, 60*time.Second) // v1 active, v1 and v2 caught up
	useToken("tok-reader-91c2")
	b.Until("the versions again", `!!document.querySelector('button[data-promote="v2"]')`, 30*time.Second)
	b.Run(chromedp.Click(chromedp.CSS(`button[data-promote="v2"]`)), chromedp.Click(chromedp.ID("confirm")))
	b.Until("the promotion refused", `document.getElementById("result").textContent.includes("Refused")`, 30*time.Second)
	if a := active(); a != "v1" {
		t.Fatalf("a promotion with a reader's token made %s active", a)
	}
	b.Screenshot("httpapi-versions-refused")
	// The operator promotes v2, then rolls back.
	useToken(adminToken)
	b.Until("the versions again", `!!document.querySelector('button[data-promote="v2"]')`, 30*time.Second)
	b.Run(chromedp.Click(chromedp.CSS(`button[data-promote="v2"]`)), chromedp.Click(chromedp.ID("confirm")))
	b.Until("v2 promoted", `document.getElementById("result").textContent.includes("v2 is active")`, 30*time.Second)
	if a := active(); a != "v2" {
		t.Errorf("after the promotion %s is active, want v2", a)
	}
	b.Until("v2 shown active", `!!document.querySelector('#versions tr[data-version="v2"] .badge.good') && !!document.querySelector("button[data-rollback]")`, 30*time.Second)
	b.Run(chromedp.Click(chromedp.CSS("button[data-rollback]")), chromedp.Click(chromedp.ID("confirm")))
	b.Until("rolled back", `document.getElementById("result").textContent.includes("v1 is active")`, 30*time.Second)
	if a := active(); a != "v1" {
		t.Errorf("after the rollback %s is active, want v1", a)
	}
	if errs := b.Errors(); len(errs) > 0 {
		t.Errorf("%d JavaScript errors: %q", len(errs), errs)
	}
}
