package engine_test

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/internal/await"
)

// Before it runs, an instance answers every kind of query with
// ErrNotRunning.
func TestQueriesBeforeRunAreNotRunning(t *testing.T) {
	a, err := engine.NewApp(wordCount("in", "out"), engine.Config{AppID: "q", Brokers: []string{"localhost:1"}, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if s := a.State(); s != engine.AppCreated || s.String() != "created" {
		t.Errorf("State before Run = %v (%d), want created", s, s)
	}
	if _, err := a.LocalStore("counts"); !errors.Is(err, engine.ErrNotRunning) {
		t.Errorf("LocalStore: %v, want ErrNotRunning", err)
	}
	if _, err := a.StandbyStore("counts", 10); !errors.Is(err, engine.ErrNotRunning) {
		t.Errorf("StandbyStore: %v, want ErrNotRunning", err)
	}
	if _, err := engine.QueryKeyValueStore(a, "counts", serde.String, serde.Int64); !errors.Is(err, engine.ErrNotRunning) {
		t.Errorf("QueryKeyValueStore: %v, want ErrNotRunning", err)
	}
	if _, _, err := engine.KeyOwner(a, "counts", "ant", serde.String); !errors.Is(err, engine.ErrNotRunning) {
		t.Errorf("KeyOwner: %v, want ErrNotRunning", err)
	}
}

// A key of the other instance's task is a *NotLocalError that names the
// owner as KeyOwner does, address and tags included, whether it is read
// through a typed store or the raw LocalStore; the raw store refuses
// writes with the engine's ErrReadOnly.
func TestNotLocalErrorNamesTheOwner(t *testing.T) {
	k := newKT(t)
	in, out := k.topic("lines"), k.topic("counts")
	k.create(4, in, out)
	top := wordCount(in, out)
	apps := map[string]*app{}
	for _, id := range []string{"a", "b"} {
		apps[id] = k.start(top, engine.Config{InstanceID: id, AdvertisedAddr: id + ".test:80", Tags: map[string]string{"zone": "z-" + id}})
	}
	var mu sync.Mutex
	var states []engine.AppState
	apps["a"].OnStateChange(func(s engine.AppState) { mu.Lock(); states = append(states, s); mu.Unlock() })
	await.Until(t, 60*time.Second, "both instances to have tasks", func() bool {
		k.checkApps()
		return len(apps["a"].Tasks()) > 0 && len(apps["b"].Tasks()) > 0 && len(apps["a"].Tasks())+len(apps["b"].Tasks()) == 8
	})
	recs := genLines(3, 100)
	want := wordCounts(recs)
	k.produce(in, recs...)
	k.table(out, 60*time.Second, func(m map[string]int64) bool { return maps.Equal(m, want) })

	for w := range want {
		owner, _, err := engine.KeyOwner(apps["a"].App, "counts", w, serde.String)
		if err != nil {
			t.Fatal(err)
		}
		if owner.Addr != owner.ID+".test:80" || owner.Tags["zone"] != "z-"+owner.ID {
			t.Fatalf("KeyOwner(%s) = %+v, want the owner's address and tags", w, owner)
		}
		other := map[string]*app{"a": apps["b"], "b": apps["a"]}[owner.ID]
		check := func(how string, err error) {
			t.Helper()
			var nl *engine.NotLocalError
			if !errors.As(err, &nl) {
				t.Fatalf("%s %s on %s: %v, want a *NotLocalError", how, w, other.ID(), err)
			}
			if nl.Store != "counts" || !slices.Contains(apps[owner.ID].Tasks(), nl.Task) || !strings.HasSuffix(nl.Task, fmt.Sprintf("_%d", nl.Partition)) ||
				nl.Owner.ID != owner.ID || nl.Owner.Addr != owner.Addr || !maps.Equal(nl.Owner.Tags, owner.Tags) {
				t.Fatalf("%s %s on %s: %+v, want store counts, a task of %s, owner %+v", how, w, other.ID(), nl, owner.ID, owner)
			}
		}
		typed, err := engine.QueryKeyValueStore(other.App, "counts", serde.String, serde.Int64)
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = typed.Get(w)
		check("typed Get", err)
		raw, err := other.LocalStore("counts")
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = raw.Get([]byte(w))
		check("LocalStore Get", err)
		if err := raw.Put([]byte(w), []byte{1}, 0); !errors.Is(err, engine.ErrReadOnly) {
			t.Errorf("LocalStore Put: %v, want ErrReadOnly", err)
		}
	}
	if err := apps["a"].stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if n := len(states); n < 2 || states[n-2] != engine.AppStopping || states[n-1] != engine.AppStopped {
		t.Errorf("a's states as OnStateChange saw them: %v, want them to end stopping, stopped", states)
	}
}
