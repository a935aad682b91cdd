package engine_test

import (
	"errors"
	"testing"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/serde"
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
