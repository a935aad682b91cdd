package engine_test

import (
	"bytes"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// A topology that decides runs exactly once unless its Config says
// otherwise, and says so when it is told at least once; any other runs at
// least once. ACLs follow the guarantee the application runs with.
func TestDefaultGuarantee(t *testing.T) {
	build := func(decides bool) *engine.Topology {
		b := engine.NewBuilder()
		engine.NewStream(b, "commands", serde.String, serde.String).To("events")
		if decides {
			b.DecidesExactlyOnce("aggregate inventory")
		}
		top, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		return top
	}
	for _, c := range []struct {
		decides bool
		given   engine.Guarantee
		runs    engine.Guarantee
		warns   bool
	}{
		{false, engine.DefaultGuarantee, engine.AtLeastOnce, false},
		{false, engine.ExactlyOnce, engine.ExactlyOnce, false},
		{true, engine.DefaultGuarantee, engine.ExactlyOnce, false},
		{true, engine.ExactlyOnce, engine.ExactlyOnce, false},
		{true, engine.AtLeastOnce, engine.AtLeastOnce, true},
	} {
		top := build(c.decides)
		var logged bytes.Buffer
		cfg := engine.Config{AppID: "shop", Brokers: []string{"127.0.0.1:1"}, Guarantee: c.given, StateDir: t.TempDir(),
			Logger: slog.New(slog.NewTextHandler(&logged, nil))}
		a, err := engine.NewApp(top, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if a.Guarantee() != c.runs {
			t.Errorf("decides %v, given %v: runs %v, want %v", c.decides, c.given, a.Guarantee(), c.runs)
		}
		warned := strings.Contains(logged.String(), "level=WARN") && strings.Contains(logged.String(), "aggregate inventory")
		if warned != c.warns {
			t.Errorf("decides %v, given %v: warned %v (%q)", c.decides, c.given, warned, logged.String())
		}
		transactional := slices.ContainsFunc(engine.ACLs(top, cfg), func(acl engine.ACL) bool { return acl.Resource == "transactional-id" })
		if transactional != (c.runs == engine.ExactlyOnce) {
			t.Errorf("decides %v, given %v: ACLs for transactions %v", c.decides, c.given, transactional)
		}
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if got := build(true).Decides(); !slices.Equal(got, []string{"aggregate inventory"}) {
		t.Errorf("Decides: %v", got)
	}
}
