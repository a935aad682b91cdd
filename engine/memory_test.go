package engine_test

import (
	"math"
	"os"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/internal/await"
)

// Two instances with memory budgets in one process: while they run, the Go
// heap's soft limit is the sum of their shares (5/8 of each budget); as
// each stops its share goes, and with the last the limit is lifted.
func TestMemoryBudgetSetsTheHeapLimit(t *testing.T) {
	if os.Getenv("GOMEMLIMIT") != "" || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Skip("the process has a memory limit of its own, which MemoryBudget leaves alone")
	}
	k := newKT(t)
	in, out := k.topic("in"), k.topic("out")
	k.create(2, in, out)
	limit := func() int64 { return debug.SetMemoryLimit(-1) }
	a := k.start(passthrough(t, in, out), engine.Config{AppID: k.prefix + "-a", MemoryBudget: 128 << 20})
	b := k.start(passthrough(t, in, out), engine.Config{AppID: k.prefix + "-b", MemoryBudget: 256 << 20})
	awaitReady(t, a, "instance a")
	awaitReady(t, b, "instance b")
	if got, want := limit(), int64(80+160)<<20; got != want {
		t.Fatalf("the heap limit with both running: %d, want %d", got, want)
	}
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	await.Until(t, 10*time.Second, "the heap limit without a's share", func() bool { return limit() == 160<<20 })
	if err := b.stop(); err != nil {
		t.Fatal(err)
	}
	await.Until(t, 10*time.Second, "the heap limit lifted", func() bool { return limit() == math.MaxInt64 })
}

// A process that sets its own limit keeps it.
func TestMemoryBudgetLeavesTheUsersLimit(t *testing.T) {
	if os.Getenv("GOMEMLIMIT") != "" {
		t.Skip("GOMEMLIMIT is set")
	}
	prev := debug.SetMemoryLimit(1 << 30)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	k := newKT(t)
	in, out := k.topic("in"), k.topic("out")
	k.create(1, in, out)
	a := k.start(passthrough(t, in, out), engine.Config{MemoryBudget: 128 << 20})
	awaitReady(t, a, "the instance")
	if got := debug.SetMemoryLimit(-1); got != 1<<30 {
		t.Fatalf("the heap limit: %d, want the user's %d", got, 1<<30)
	}
}

func TestMemoryBudgetTooSmall(t *testing.T) {
	_, err := engine.NewApp(passthrough(t, "in", "out"), engine.Config{AppID: "a", Brokers: []string{"localhost:9092"}, MemoryBudget: 1 << 20})
	if err == nil || !strings.Contains(err.Error(), "MemoryBudget 1048576 is under the least budget") {
		t.Fatalf("NewApp with a 1 MiB budget: %v", err)
	}
}

// awaitReady waits until the instance runs with its state restored.
func awaitReady(t *testing.T, a *app, name string) {
	t.Helper()
	await.Until(t, 60*time.Second, name+" ready", func() bool {
		select {
		case <-a.Ready():
			return true
		default:
			return false
		}
	})
}
