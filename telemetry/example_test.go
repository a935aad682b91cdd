package telemetry_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/oxbow-dev/oxbow/telemetry"
)

// A process takes its log format from -log-format or $OXBOW_LOG_FORMAT;
// a format that is not one refuses to start.
func ExampleNewLogger() {
	if _, err := telemetry.NewLogger(os.Stderr, "yaml", slog.LevelInfo); err != nil {
		fmt.Println(err)
	}
	log, err := telemetry.NewLogger(os.Stderr, "json", slog.LevelInfo)
	if err != nil {
		panic(err)
	}
	slog.SetDefault(log) // what logs through slog's default logger, httpapi's 5xx causes included
	fmt.Println(log.Handler().Enabled(context.Background(), slog.LevelDebug))
	// Output:
	// telemetry: log format "yaml": want text or json
	// false
}
