package engine

import (
	"errors"
	"testing"

	"github.com/oxbow-dev/oxbow/engine/internal/runtime"
	"github.com/oxbow-dev/oxbow/engine/internal/topo"
	"github.com/oxbow-dev/oxbow/engine/record"
)

// The header the runtime marks positions with is the one package record
// (and so engine) names.
func TestPositionHeaderIsTheRuntimes(t *testing.T) {
	if record.PositionHeader != runtime.PositionHeader {
		t.Errorf("record.PositionHeader %q, the runtime writes %q", record.PositionHeader, runtime.PositionHeader)
	}
}

// The runtime's NotLocalError becomes the engine's, the owner's tags
// copied, and a task without an owner says so.
func TestPublicErr(t *testing.T) {
	tags := map[string]string{"zone": "z1"}
	in := &runtime.NotLocalError{Store: "s", Task: topo.TaskID{Sub: 1, Partition: 3},
		Owner: runtime.Instance{MemberID: "m", InstanceID: "b", Addr: "b:80", Tags: tags}}
	var nl *NotLocalError
	if err := publicErr(in); !errors.As(err, &nl) {
		t.Fatalf("publicErr = %T %v, want a *NotLocalError", err, err)
	}
	if nl.Store != "s" || nl.Task != "1_3" || nl.Partition != 3 || nl.Owner.ID != "b" || nl.Owner.Addr != "b:80" || nl.Owner.Tags["zone"] != "z1" {
		t.Fatalf("publicErr = %+v", nl)
	}
	nl.Owner.Tags["zone"] = "changed"
	if tags["zone"] != "z1" {
		t.Error("the NotLocalError's tags are the group's own map")
	}
	if got, want := nl.Error(), "engine: store s: the key belongs to task 1_3 on instance b (b:80)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	orphan := publicErr(&runtime.NotLocalError{Store: "s", Task: topo.TaskID{Sub: 1, Partition: 3}})
	if got, want := orphan.Error(), "engine: store s: task 1_3 has no owner right now (the group is rebalancing)"; got != want {
		t.Errorf("no owner: Error() = %q, want %q", got, want)
	}
	if err := publicErr(ErrNotReady); err != ErrNotReady {
		t.Errorf("publicErr(ErrNotReady) = %v", err)
	}
}
