package state_test

import (
	"testing"

	"github.com/oxbow-dev/oxbow/engine/internal/state"
	"github.com/oxbow-dev/oxbow/engine/internal/topo"
	"github.com/oxbow-dev/oxbow/engine/internal/topo/storetest"
)

// neighbours are store partitions next to ("s", 7) in key order, or with
// names that extend "s": a range over ("s", 7) that leaks shows their keys.
var neighbours = []struct {
	name string
	part int32
}{{"s", 6}, {"s", 8}, {"s", -1}, {"s", 0}, {"", 7}, {"s\x00", 7}, {"s\xff", 7}, {"st", 7}, {"r", 7}, {"t", 7}}

var neighbourKeys = []string{"", "\x00", "a", "k05", "\xff", "\xff\xff\xff\xff\xff"}

func seed(t testing.TB, task *state.Task) {
	t.Helper()
	for _, n := range neighbours {
		s := task.Store(n.name, n.part)
		for _, k := range neighbourKeys {
			if err := s.Put([]byte(k), []byte("neighbour"), 1); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// openConformance opens the store under test, ("s", 7), with committed
// neighbours and, in the same task, pending ones.
func openConformance(t *testing.T, opts state.Options) (*state.Task, topo.KVStore) {
	db := openDB(t, t.TempDir(), opts)
	setup := db.Task()
	seed(t, setup)
	if err := setup.Commit(); err != nil {
		t.Fatal(err)
	}
	task := db.Task()
	seed(t, task)
	t.Cleanup(func() { _ = task.Close() })
	return task, task.Store("s", 7)
}

func TestConformancePending(t *testing.T) {
	storetest.Run(t, func(t *testing.T) topo.KVStore {
		_, s := openConformance(t, state.Options{})
		return s
	})
}

func TestConformanceCommitted(t *testing.T) {
	storetest.Run(t, func(t *testing.T) topo.KVStore {
		task, s := openConformance(t, state.Options{})
		return autoCommit{s, task}
	})
}

// autoCommit commits after every write, so reads go to the committed state
// (and a write in a Range loop commits under the loop).
type autoCommit struct {
	topo.KVStore
	task *state.Task
}

func (a autoCommit) Put(key, value []byte, ts int64) error {
	if err := a.KVStore.Put(key, value, ts); err != nil {
		return err
	}
	return a.task.Commit()
}

func (a autoCommit) Delete(key []byte, ts int64) error {
	if err := a.KVStore.Delete(key, ts); err != nil {
		return err
	}
	return a.task.Commit()
}
