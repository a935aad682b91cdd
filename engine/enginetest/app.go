package enginetest

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/engine"
)

// StartApp runs an instance of a topology on a broker for a test and
// returns it once it is ready (a state directory of the test's and a
// discarding logger unless cfg says otherwise). When the test ends the
// instance is closed, and an error it stopped with fails the test; closing
// it earlier is fine.
func StartApp(tb testing.TB, top *engine.Topology, cfg engine.Config) *engine.App {
	tb.Helper()
	if cfg.StateDir == "" {
		cfg.StateDir = tb.TempDir()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	app, err := engine.NewApp(top, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- app.Run(context.Background()) }()
	tb.Cleanup(func() {
		if err := app.Close(); err != nil {
			tb.Errorf("instance %s: %v", app.ID(), err)
		}
	})
	select {
	case <-app.Ready():
	case err := <-done:
		tb.Fatalf("instance %s stopped before it was ready: %v", app.ID(), err)
	case <-time.After(2 * time.Minute):
		tb.Fatalf("instance %s is not ready after 2 minutes", app.ID())
	}
	return app
}
