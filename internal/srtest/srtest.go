// Package srtest gives tests a schema registry: the real one that
// scripts/services.sh starts (Apicurio Registry, Confluent's API) when
// OXBOW_REGISTRY_URL names it, else franz-go's in-memory fake. The fake
// accepts every schema as compatible, so a test of a compatibility rule
// asks for the real one with [Real]: without it the test is skipped, or
// fails under CI (CI=true), whose .ci/run starts it.
//
// Either way the test talks to the registry through a proxy of its own,
// which can play a registry that is down ([Registry.Down]).
package srtest

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
)

// Registry is a test's registry.
type Registry struct {
	// URL is the proxy's: what the code under test is given.
	URL string
	// Client talks to the registry directly, past the proxy.
	Client *sr.Client
	// IsReal says whether it is the real registry rather than the fake.
	IsReal bool
	// Prefix is unique to the test: names of topics (hence subjects) that
	// start with it meet no other test's on a shared registry.
	Prefix string
	// Base is the real registry's root URL, without the path of its
	// Confluent-compatible API: Apicurio's own API and serdes start there.
	// Empty for the fake.
	Base string

	answer  atomic.Int32 // a status to answer every request with; 0: pass them on
	refused atomic.Int64
	hang    atomic.Pointer[chan struct{}] // requests wait until it closes
	held    atomic.Int64
}

// New is a registry for the test: the real one if OXBOW_REGISTRY_URL is
// set, else a fake of the test's own.
func New(tb testing.TB) *Registry {
	tb.Helper()
	target := os.Getenv("OXBOW_REGISTRY_URL")
	real := target != ""
	if !real {
		f := srfake.New()
		tb.Cleanup(f.Close)
		target = f.URL()
	}
	return start(tb, target, real)
}

// Real is the real registry, for tests of what the fake does not do
// (compatibility rules): without OXBOW_REGISTRY_URL the test is skipped, or
// fails under CI.
func Real(tb testing.TB) *Registry {
	tb.Helper()
	target := os.Getenv("OXBOW_REGISTRY_URL")
	if target == "" {
		msg := "needs the real schema registry: run scripts/services.sh start registry and eval \"$(scripts/services.sh env)\" (OXBOW_REGISTRY_URL)"
		if os.Getenv("CI") == "true" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	return start(tb, target, true)
}

func start(tb testing.TB, target string, real bool) *Registry {
	tb.Helper()
	u, err := url.Parse(target)
	if err != nil {
		tb.Fatalf("srtest: registry URL %q: %v", target, err)
	}
	r := &Registry{IsReal: real, Prefix: "t" + randomHex(4)}
	if real {
		r.Base = strings.TrimSuffix(strings.TrimSuffix(target, "/"), "/apis/ccompat/v7")
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if h := r.hang.Load(); h != nil {
			r.held.Add(1)
			select {
			case <-*h:
			case <-req.Context().Done():
				return
			}
		}
		if code := r.answer.Load(); code != 0 {
			r.refused.Add(1)
			http.Error(w, "srtest: the registry answers "+http.StatusText(int(code)), int(code))
			return
		}
		proxy.ServeHTTP(w, req)
	}))
	tb.Cleanup(srv.Close)
	// The proxy keeps the target's path: requests to srv.URL/x go to
	// target/x.
	r.URL = srv.URL
	r.Client, err = sr.NewClient(sr.URLs(target))
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

// Down makes the proxy answer every request with 503 (true) or pass them
// on again (false).
func (r *Registry) Down(down bool) {
	if down {
		r.Answer(http.StatusServiceUnavailable)
	} else {
		r.Answer(0)
	}
}

// Answer makes the proxy answer every request with the status code (401,
// say), or pass them on again (0).
func (r *Registry) Answer(code int) { r.answer.Store(int32(code)) }

// Refused is how many requests the proxy has answered itself.
func (r *Registry) Refused() int64 { return r.refused.Load() }

// Hang holds every request until the returned function is called (or the
// client gives up on it).
func (r *Registry) Hang() (release func()) {
	ch := make(chan struct{})
	r.hang.Store(&ch)
	return func() {
		if r.hang.CompareAndSwap(&ch, nil) {
			close(ch)
		}
	}
}

// Held is how many requests Hang has held.
func (r *Registry) Held() int64 { return r.held.Load() }

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
