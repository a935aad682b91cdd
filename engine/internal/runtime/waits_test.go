package runtime

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// kafkaWaits lists every call of the runtime that waits on Kafka through
// its clients (function, then the method called), and how the wait is
// watched: "waiting" where the function starts a wait (waits.go), which
// says at WARN what it waits for past waitBound; otherwise what watches it
// or bounds it.
var kafkaWaits = map[string]string{
	"newGroupClient ProducerID":             "waiting",
	"beginTxn ProducerID":                   "waiting",
	"flushProduced Flush":                   "waiting",
	"commitOffsetsLocked CommitOffsetsSync": "waiting",
	"endTxnLocked End":                      "waiting",
	"abortLocked End":                       "waiting",
	"reconcileEOS End":                      "waiting",
	"teardown End":                          "waiting",
	"round PollFetches":                     "the stall watcher: records waiting on a partition that polled nothing (stall.go); no record to poll is not a wait",
	"step PollRecords":                      "the stall watcher: a restore that moves nothing (stall.go)",
	"poll PollRecords":                      "a millisecond: takes what arrived, waits for nothing",
	"onLost AbortBufferedRecords":           "10s, then a WARN; it waits only for records in flight to fail or land",
	"bootstrap PollRecords":                 "ends after four empty polls of 500ms; the table's end is known before",
	"shutdown LeaveGroupContext":            "leaveTimeout, then a WARN that the join in flight is abandoned",
}

// blocking are the franz-go calls that wait on the brokers.
var blocking = []string{"End", "Flush", "ProducerID", "CommitOffsetsSync", "CommitRecords", "CommitUncommittedOffsets", "CommitMarkedOffsets",
	"PollFetches", "PollRecords", "LeaveGroupContext", "LeaveGroup", "ProduceSync", "EndTransaction", "AbortBufferedRecords"}

// TestWaitsAreWatched finds the calls of the package that wait on Kafka
// through its clients (r.cl, r.sess, and the restorer's and global
// tables' clients) and checks them against kafkaWaits: a call not listed
// fails, a listed one gone fails, and a function listed as "waiting" must
// start a wait.
func TestWaitsAreWatched(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	found := map[string]bool{}
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			waits := false
			var calls []string
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if sel.Sel.Name == "waiting" {
					waits = true
				}
				// The receiver is a client: ….cl or ….sess.
				recv, ok := sel.X.(*ast.SelectorExpr)
				if !ok || (recv.Sel.Name != "cl" && recv.Sel.Name != "sess") || !slices.Contains(blocking, sel.Sel.Name) {
					return true
				}
				calls = append(calls, fn.Name.Name+" "+sel.Sel.Name)
				return true
			})
			for _, c := range calls {
				found[c] = true
				how, listed := kafkaWaits[c]
				switch {
				case !listed:
					t.Errorf("%s: %s waits on Kafka and is not in kafkaWaits: watch it (r.waiting) and list it", fset.Position(fn.Pos()), c)
				case how == "waiting" && !waits:
					t.Errorf("%s: %s is listed as watched, and the function starts no wait (r.waiting)", fset.Position(fn.Pos()), c)
				}
			}
		}
	}
	for _, c := range slices.Sorted(maps.Keys(kafkaWaits)) {
		if !found[c] {
			t.Errorf("kafkaWaits lists %q, which the package no longer calls", c)
		}
	}
}
