package topo_test

import (
	"testing"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
	"github.com/oxbow-dev/oxbow/engine/internal/topo/storetest"
)

func TestMemStoreConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) topo.KVStore {
		s := topo.NewMemStore("mem")
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}
