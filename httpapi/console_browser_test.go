package httpapi_test

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/oxbow-dev/oxbow/httpapi"
	"github.com/oxbow-dev/oxbow/internal/browser"
)

// The console in Chromium, on a secured, versioned application of two
// versions: without a token it asks for one; with one it draws the
// topology with every store and its rates, places every task, and lists
// the versions, caught up; a promotion with a reader's token is refused
// and promotes nothing; with the operator's it promotes, and a rollback
// brings the first version back. No JavaScript error on the way.
func TestConsoleInBrowser(t *testing.T) {
	b := browser.New(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	vs := newCoVersioned(t, "console-browser", 3, ln.Addr().String())
	top, active := vs.top, vs.active
	coProduce(t, vs.cl, 0, 200)
	cfg := vs.cfg
	cfg.Console = true
	h, err := httpapi.New(cfg)
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
	coProduce(t, vs.cl, 200, 300)
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
	if browser.Eval[bool](b, `!!document.querySelector("button[data-rollback]")`) {
		t.Error("a rollback offered with no version active before v1")
	}
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
	b.Until("v2 shown active", `!!document.querySelector('#versions tr[data-version="v2"] .badge.good') && !!document.querySelector('button[data-rollback="v1"]')`, 30*time.Second)
	b.Run(chromedp.Click(chromedp.CSS("button[data-rollback]")), chromedp.Click(chromedp.ID("confirm")))
	b.Until("rolled back", `document.getElementById("result").textContent.includes("v1 is active")`, 30*time.Second)
	if a := active(); a != "v1" {
		t.Errorf("after the rollback %s is active, want v1", a)
	}
	if errs := b.Errors(); len(errs) > 0 {
		t.Errorf("%d JavaScript errors: %q", len(errs), errs)
	}
}
