package engine

import (
	"testing"

	"github.com/oxbow-dev/oxbow/engine/internal/runtime"
	"github.com/oxbow-dev/oxbow/engine/record"
)

// The header the runtime marks positions with is the one package record
// (and so engine) names.
func TestPositionHeaderIsTheRuntimes(t *testing.T) {
	if record.PositionHeader != runtime.PositionHeader {
		t.Errorf("record.PositionHeader %q, the runtime writes %q", record.PositionHeader, runtime.PositionHeader)
	}
}
