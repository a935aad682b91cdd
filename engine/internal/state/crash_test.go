package state_test

import (
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/oxbow-dev/oxbow/engine/internal/state"
)

// crashDirEnv names the state directory of TestSyncedCommitSurvivesCrash's
// child process, which commits and then exits without closing the DB, as a
// killed process does.
const crashDirEnv = "OXBOW_STATE_CRASH_DIR"

// TestCrashChild is the child of TestSyncedCommitSurvivesCrash: it commits
// a few keys with their checkpoint, syncs if told to, and exits at once.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("the child of TestSyncedCommitSurvivesCrash")
	}
	db, err := state.Open(dir, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	task := db.Task()
	s := task.Store("agg", 0)
	for i := range 10 {
		mustPut(t, s, fmt.Sprintf("k%d", i), "v", int64(i))
	}
	if err := task.SetCheckpoint("agg-changelog", 0, 10); err != nil {
		t.Fatal(err)
	}
	if err := task.Commit(); err != nil {
		t.Fatal(err)
	}
	if os.Getenv("OXBOW_STATE_CRASH_SYNC") != "" {
		if err := db.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	os.Exit(0) // no Close: the process ends as a killed one does
}

// A commit is in pebble's write-ahead log only once something writes out
// its last, partial block: a process that ends after a few small commits
// leaves them in memory, and they are gone. After DB.Sync they survive.
func TestSyncedCommitSurvivesCrash(t *testing.T) {
	for _, sync := range []bool{false, true} {
		t.Run(fmt.Sprintf("sync=%v", sync), func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run", "^TestCrashChild$")
			cmd.Env = append(os.Environ(), crashDirEnv+"="+dir)
			if sync {
				cmd.Env = append(cmd.Env, "OXBOW_STATE_CRASH_SYNC=1")
			}
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("child: %v\n%s", err, out)
			}
			db := openDB(t, dir, state.Options{})
			got := checkpoint(t, db, "agg-changelog", 0)
			v := value(t, db.Task().Store("agg", 0), "k9")
			switch {
			case sync && (got != "10" || v != "v"):
				t.Errorf("after a synced commit and a crash: checkpoint %s, k9 = %s; want 10 and v", got, v)
			case !sync && got != "none":
				// Not a promise of pebble's, but what this test shows:
				// without a sync the commit was lost.
				t.Logf("the commit survived without a sync (checkpoint %s)", got)
			case !sync:
				t.Logf("without a sync the commit was lost with the process, as expected")
			}
		})
	}
}
