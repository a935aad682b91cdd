package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine/hanging"
)

// Kafka can leave a transaction hanging, and no client can end it.
//
// A transaction coordinator that comes back with a transaction it had
// prepared (PrepareCommit or PrepareAbort written, markers not all sent)
// sends the markers again, but drops those of partitions that have no
// leader at that moment, taking them for deleted (its marker channel logs
// "Couldn't find leader endpoint for partitions ... likely deleted
// already"), and records the transaction complete. A single broker in
// KRaft combined mode that is killed and started again is fenced about 9s
// after it starts (its controller waits out the old incarnation's session:
// DUPLICATE_BROKER_REGISTRATION until then), every partition it leads is
// leaderless for a moment, and the coordinator completes its prepared
// transactions right then. Seen in one run of eight of
// TestBrokerRestartSingle: a kill between an EndTxn's PrepareCommit and its
// markers. The partitions keep an open transaction forever:
// read-committed readers stop at it, and the group's offsets answer
// UNSTABLE_OFFSET_COMMIT, so no member can start. Kafka's remedy is an
// operator's (kafka-transactions.sh find-hanging, then abort), and so is
// this: hangingRepair finds such transactions and writes the markers the
// coordinator dropped, commit or abort as it had decided (package hanging
// reads it from __transaction_state), which is what the instance's state
// assumes.

// hangingRepair repairs the hanging transactions of an application's
// producers on its topics and its group's offsets, with package hanging.
type hangingRepair struct {
	t      *testing.T
	cl     *kgo.Client
	app    string   // the application id: its internal topics' prefix
	topics []string // its user topics
}

func newHangingRepair(t *testing.T, c crashConfig) (*hangingRepair, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers...))
	if err != nil {
		return nil, err
	}
	return &hangingRepair{t: t, cl: cl, app: c.appID, topics: []string{c.in, c.out}}, nil
}

func (h *hangingRepair) close() { h.cl.Close() }

// check looks once, and repairs what its coordinator decided. It reports
// what it repaired; errors (a broker away) count as nothing found.
func (h *hangingRepair) check(ctx context.Context) []string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	all, err := kadm.NewClient(h.cl).ListTopics(ctx)
	if err != nil {
		return nil
	}
	topics := []string{"__consumer_offsets"}
	for _, d := range all.Sorted() {
		if strings.HasPrefix(d.Topic, h.app+"-") || slices.Contains(h.topics, d.Topic) {
			topics = append(topics, d.Topic)
		}
	}
	found, err := hanging.Find(ctx, h.cl, topics...)
	if err != nil {
		return nil
	}
	// The offsets' topic is every group's: only this application's
	// producers are its to repair.
	found = slices.DeleteFunc(found, func(t hanging.Txn) bool {
		if !strings.HasPrefix(t.TxnID, h.app+"-") {
			return true
		}
		if t.Decision == hanging.Refuse {
			h.t.Logf("hanging, not repaired: %v", t)
			return true
		}
		return false
	})
	repaired, err := hanging.Repair(ctx, h.cl, found)
	if err != nil {
		h.t.Logf("repairing hanging transactions: %v", err)
	}
	var done []string
	for _, t := range repaired {
		msg := fmt.Sprintf("Kafka left a transaction hanging; wrote the marker its coordinator had dropped, as an operator would: %v", t)
		h.t.Log(msg)
		done = append(done, msg)
	}
	return done
}
