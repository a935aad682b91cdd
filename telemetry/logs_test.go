package telemetry_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"log/slog"
	"strings"
	"testing"

	"github.com/oxbow-dev/oxbow/telemetry"
)

// The format comes from the flag, else the environment, else text; JSON
// lines carry the attributes as fields.
func TestLogFormat(t *testing.T) {
	for _, c := range []struct {
		env, flag string
		json      bool
	}{
		{"", "", false},
		{"json", "", true},
		{"JSON", "", true},
		{"json", "text", false},
		{"", "json", true},
	} {
		t.Setenv(telemetry.LogFormatEnv, c.env)
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		format := telemetry.LogFormatFlag(fs)
		var args []string
		if c.flag != "" {
			args = []string{"-log-format", c.flag}
		}
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		log, err := telemetry.NewLogger(&out, *format, slog.LevelInfo)
		if err != nil {
			t.Fatal(err)
		}
		log.Debug("hidden")
		log.Info("ready", "addr", "127.0.0.1:8080")
		var line struct{ Level, Msg, Addr string }
		isJSON := json.Unmarshal(out.Bytes(), &line) == nil
		if isJSON != c.json || strings.Contains(out.String(), "hidden") {
			t.Errorf("env %q, flag %q: %q, want JSON %v", c.env, c.flag, out.String(), c.json)
		}
		if isJSON && (line.Level != "INFO" || line.Msg != "ready" || line.Addr != "127.0.0.1:8080") {
			t.Errorf("the JSON line %q", out.String())
		}
	}
}
