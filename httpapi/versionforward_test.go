package httpapi_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/httpapi"
	"github.com/oxbow-dev/oxbow/internal/await"
	"github.com/oxbow-dev/oxbow/versions"
)

// Two instances, each running one version of the application (as two
// deployments do while the second catches up): each answers the reads for
// the version it does not run by asking the other, so a promotion
// switches the reads of both — a change feed too, event by event — and
// everything else (probes, commands) it answers itself. Forwarded reads
// are authorized where they arrive and vouched for to the other instance;
// a forwarded feed ends when the forwarding API closes; with the instance
// of a version gone, the answer is 502, never another version's data.
func TestVersionForwarding(t *testing.T) {
	env, topic, top, cl := kvTable(t, "version-forward", 2)
	ctx := context.Background()
	control, err := versions.New(env.Brokers, versions.Options{Topic: topic + "-control"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(control.Close)
	watcher := control.Watcher()
	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan error, 1)
	go func() { watched <- watcher.Run(wctx) }()
	t.Cleanup(func() {
		stopWatch()
		if err := <-watched; err != nil {
			t.Errorf("watcher: %v", err)
		}
	})
	coProduce(t, cl, 0, 50)

	// Instance "a" runs v1, instance "b" v2, each serving its own address.
	urls := map[string]string{}
	servers := map[string]*http.Server{}
	handlers := map[string]*httpapi.Handler{}
	for _, v := range []string{"v1", "v2"} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		a := enginetest.StartApp(t, top, engine.Config{AppID: topic, Version: v, Brokers: env.Brokers, InstanceID: "i-" + v,
			AdvertisedAddr: ln.Addr().String(), SessionTimeout: 6 * time.Second, LeaveGroupOnClose: true})
		if err := control.RegisterApp(ctx, a, top); err != nil {
			t.Fatal(err)
		}
		if _, err := control.PromoteIfNone(ctx, topic, v); err != nil {
			t.Fatal(err)
		}
		h, err := httpapi.New(httpapi.Config{Versions: map[string]httpapi.Served{v: {Instance: a, Views: coViews(t), Topology: top}},
			Active: func() string { return watcher.Active(topic) }, VersionControl: control, Brokers: env.Brokers,
			Authenticator: httpapi.Tokens(tokens), PeerSecret: []byte(peerSecret), Heartbeat: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		srv := httpapi.NewServer("", h)
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { h.Close(); _ = srv.Close() })
		urls[v], servers[v], handlers[v] = "http://"+ln.Addr().String(), srv, h
	}
	a, b := urls["v1"], urls["v2"]

	type answer struct {
		code              int
		version, servedBy string
		body              string
	}
	get := func(url, token string, headers ...string) answer {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		for i := 0; i < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return answer{resp.StatusCode, resp.Header.Get(httpapi.VersionHeader), resp.Header.Get("Oxbow-Served-By"), string(body)}
	}
	const reader = "tok-reader-91c2"
	// k007 was written once, with 7; both versions have read it all.
	await.NoError(t, time.Minute, "both versions have the key", func() error {
		for _, v := range []string{"v1", "v2"} {
			if got := get(a+"/views/kv/keys/k007", reader, httpapi.VersionHeader, v); got.code != 200 || got.version != v || !strings.Contains(got.body, `"value":7`) {
				return fmt.Errorf("%s through a: %+v", v, got)
			}
		}
		return nil
	})

	// v1, the first, is active: b's reads are a's, forwarded.
	if got := get(b+"/views/kv/keys/k007", reader); got.code != 200 || got.version != "v1" || got.servedBy != "i-v1" {
		t.Errorf("b, v1 active: %+v", got)
	}
	if got := get(a+"/views/kv/keys/k007", reader); got.code != 200 || got.version != "v1" || got.servedBy != "" {
		t.Errorf("a, v1 active: %+v", got)
	}
	// The caller is authorized where it asks, by the route's permission.
	for _, c := range []struct {
		token, path string
		want        int
	}{{"", "/views/kv/keys/k007", 401}, {"tok-nobody-4e11", "/views/kv/keys/k007", 403}, {reader, "/status", 403}, {"tok-operator-c3a9", "/status", 200}} {
		if got := get(b+c.path, c.token); got.code != c.want {
			t.Errorf("b %s with %q: %+v, want %d", c.path, c.token, got, c.want)
		}
	}
	// A version that is not registered; a request one instance forwarded
	// to another that does not run its version either.
	if got := get(a+"/views/kv/keys/k007", reader, httpapi.VersionHeader, "v9"); got.code != 404 || !strings.Contains(got.body, "no version") {
		t.Errorf("v9: %+v", got)
	}
	if got := get(a+"/views/kv/keys/k007", reader, httpapi.VersionHeader, "v2", httpapi.VersionForwardedHeader, "i-x"); got.code != 421 {
		t.Errorf("v2 forwarded to a: %+v", got)
	}
	// Probes are the instance's own, whatever the version.
	if got := get(b+"/healthz", "", httpapi.VersionHeader, "v1"); got.code != 200 || got.version != "v2" {
		t.Errorf("b's /healthz for v1: %+v", got)
	}
	// /versions lists both, here and not.
	var listing struct {
		Active   string                  `json:"active"`
		Versions []httpapi.VersionStatus `json:"versions"`
	}
	if code := coGet(t, a+"/versions", reader, &listing); code != 200 || listing.Active != "v1" || len(listing.Versions) != 2 ||
		!listing.Versions[0].Here || listing.Versions[1].Here || listing.Versions[1].State != "not here" {
		t.Errorf("a's /versions: %d %+v", code, listing)
	}

	// A change feed of v2 opened through a, which runs no v2.
	feedReq, _ := http.NewRequest(http.MethodGet, a+"/views/kv/changes?key=k001", nil)
	feedReq.Header.Set("Authorization", "Bearer "+adminToken)
	feedReq.Header.Set(httpapi.VersionHeader, "v2")
	feedResp, err := http.DefaultClient.Do(feedReq)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { feedResp.Body.Close() })
	if feedResp.StatusCode != 200 || feedResp.Header.Get(httpapi.VersionHeader) != "v2" || feedResp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("v2's feed through a: %d %v", feedResp.StatusCode, feedResp.Header)
	}
	feed := &sse{resp: feedResp, sc: bufio.NewScanner(feedResp.Body)}

	// Promoted through a, v2 answers a's reads.
	rec := call(servers["v1"].Handler, http.MethodPost, "/versions/v2/promote", "tok-operator-c3a9")
	if rec.Code != 200 {
		t.Fatalf("promoting v2 through a: %d %s", rec.Code, rec.Body)
	}
	await.NoError(t, 30*time.Second, "a's reads are v2's", func() error {
		if got := get(a+"/views/kv/keys/k007", reader); got.code != 200 || got.version != "v2" || got.servedBy != "i-v2" {
			return fmt.Errorf("%+v", got)
		}
		return nil
	})
	// The feed, forwarded, has k001's changes as they come.
	for _, v := range []int64{1001, 1002} {
		val, _ := serde.Int64.Encode(v)
		if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte("k001"), Value: val}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			_, _, data, ok := feed.next()
			if !ok || time.Now().After(deadline) {
				t.Fatalf("the feed ended before %d", v)
			}
			if strings.Contains(data, fmt.Sprintf(`"value":%d`, v)) {
				break
			}
		}
	}

	// a's API closes: the feed it forwards ends, as its own would.
	handlers["v1"].Close()
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for {
			if _, _, _, ok := feed.next(); !ok {
				return
			}
		}
	}()
	select {
	case <-ended:
	case <-time.After(30 * time.Second):
		t.Fatal("the forwarded feed goes on after a's API closed")
	}

	// a's server stops (its engine instance is still in v1's group): b has
	// no instance of v1 to ask, and says so rather than answer v2's.
	_ = servers["v1"].Close()
	got := get(b+"/views/kv/keys/k007", reader, httpapi.VersionHeader, "v1")
	if got.code != 502 || got.version == "v2" || !strings.Contains(got.body, "refused") {
		t.Errorf("v1 from b, a gone: %+v", got)
	}
}
