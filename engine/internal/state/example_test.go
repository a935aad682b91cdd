package state_test

import (
	"fmt"
	"log"
	"os"

	"github.com/oxbow-dev/oxbow/engine/internal/state"
)

// A task writes between commits into its pending state, which its reads
// see; Commit makes the writes and their changelog checkpoint durable
// together, Discard drops both.
func Example() {
	dir, err := os.MkdirTemp("", "oxbow-state")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := state.Open(dir, state.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	task := db.Task()
	counts := task.Store("counts", 0)
	_ = counts.Put([]byte("alice"), []byte("3"), 1000)
	_ = task.SetCheckpoint("counts-changelog", 0, 1) // the changelog record is at offset 0
	_, ok, _ := db.Checkpoint("counts-changelog", 0)
	fmt.Println("checkpointed before commit:", ok)
	if err := task.Commit(); err != nil {
		log.Fatal(err)
	}

	_ = counts.Put([]byte("bob"), []byte("1"), 2000)
	e, _, _ := counts.Get([]byte("bob"))
	fmt.Printf("pending: bob=%s\n", e.Value)
	task.Discard() // say the transaction aborted

	for e, err := range counts.Range(nil, nil) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("committed: %s=%s at %d\n", e.Key, e.Value, e.Timestamp)
	}
	stores, _ := db.Stores()
	for _, sp := range stores {
		fmt.Printf("store %s/%d restores %s from offset %d\n", sp.Store, sp.Partition, sp.Changelog, sp.Offset)
	}
	// Output:
	// checkpointed before commit: false
	// pending: bob=1
	// committed: alice=3 at 1000
	// store counts/0 restores counts-changelog from offset 1
}
