// Package telemetry sets up what a process built on Oxbow reports about
// itself, the same way in every process: its logs, as text or as JSON
// for a log pipeline, chosen by a flag or the environment.
package telemetry

import (
	"cmp"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
)

// LogFormatEnv names the environment variable that chooses the log
// format when no flag does: "text" (the default) or "json".
const LogFormatEnv = "OXBOW_LOG_FORMAT"

// LogFormatFlag defines -log-format on fs, defaulting to $OXBOW_LOG_FORMAT
// or "text". Give its value to NewLogger.
func LogFormatFlag(fs *flag.FlagSet) *string {
	return fs.String("log-format", cmp.Or(os.Getenv(LogFormatEnv), "text"),
		"the logs' format: text or json (default $"+LogFormatEnv+", or text)")
}

// NewLogger returns a logger writing to w from level up in format:
// "text" (slog's key=value lines), "json" (one object a line, the fields
// time, level, msg and the attributes) or "" ($OXBOW_LOG_FORMAT, else
// text). Another format is refused, naming the ones there are.
func NewLogger(w io.Writer, format string, level slog.Leveler) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(cmp.Or(format, os.Getenv(LogFormatEnv), "text")) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("telemetry: log format %q: want text or json", format)
}
