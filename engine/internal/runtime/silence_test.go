package runtime

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Kafka's answers and their absence, as the group client's hook sees
// them: a request waiting 10s with no answer from any broker makes the
// instance out of reach (not while Degraded, which says it already);
// an answer ends it. Joins and syncs, which wait on the group by design,
// do not count.
func TestOutOfReach(t *testing.T) {
	r := &Runtime{cfg: Config{Brokers: []string{"b:9092"}}, log: slog.New(slog.DiscardHandler)}
	r.state.Store(int32(Running))
	a := &r.answers
	now := time.Now()
	if err := r.unreachable(now.Add(time.Hour)); err != nil {
		t.Fatalf("nothing asked: %v", err)
	}
	a.OnBrokerWrite(kgo.BrokerMetadata{}, keyJoinGroup, 10, 0, 0, nil)
	if err := r.unreachable(now.Add(time.Minute)); err != nil {
		t.Fatalf("only a join waits: %v", err)
	}
	a.OnBrokerWrite(kgo.BrokerMetadata{}, 1, 10, 0, 0, errors.New("broken pipe")) // not sent
	if err := r.unreachable(now.Add(time.Minute)); err != nil {
		t.Fatalf("only a request not sent: %v", err)
	}
	a.OnBrokerWrite(kgo.BrokerMetadata{}, 1, 10, 0, 0, nil) // a fetch
	if err := r.unreachable(time.Now().Add(silentBound - time.Second)); err != nil {
		t.Fatalf("a fetch waiting less than %v: %v", silentBound, err)
	}
	err := r.unreachable(time.Now().Add(silentBound + time.Second))
	if err == nil || !strings.Contains(err.Error(), "Kafka is out of its reach") || !strings.Contains(err.Error(), "b:9092") {
		t.Fatalf("a fetch waiting past %v: %v", silentBound, err)
	}
	if r.Stalled() != nil {
		t.Fatalf("Stalled before the bound: %v", r.Stalled())
	}
	r.state.Store(int32(Degraded))
	if err := r.unreachable(time.Now().Add(time.Minute)); err != nil {
		t.Fatalf("while Degraded: %v", err)
	}
	r.state.Store(int32(Running))
	a.OnBrokerE2E(kgo.BrokerMetadata{}, 1, kgo.BrokerE2E{ReadErr: errors.New("i/o timeout")})
	if r.unreachable(time.Now().Add(time.Minute)) == nil {
		t.Fatal("a failed read is no answer")
	}
	a.OnBrokerE2E(kgo.BrokerMetadata{}, 1, kgo.BrokerE2E{})
	if err := r.unreachable(time.Now().Add(time.Minute)); err != nil {
		t.Fatalf("after an answer: %v", err)
	}
}

// Stuck names an instance that has been Starting, or restoring with
// nothing restored, for stallBound, and nothing else.
func TestStuck(t *testing.T) {
	r := &Runtime{cfg: Config{Group: "g"}, log: slog.New(slog.DiscardHandler)}
	w := &stallWatch{r: r}
	now := time.Now()
	bound := r.stallBound()
	r.state.Store(int32(Starting))
	w.noteStuck(now)
	if r.Stuck() != nil {
		t.Fatalf("just starting: %v", r.Stuck())
	}
	w.noteStuck(now.Add(bound))
	if err := r.Stuck(); err == nil || !strings.Contains(err.Error(), "the group g has given this instance no tasks for 25s") {
		t.Fatalf("starting for %v: %v", bound, err)
	}
	r.state.Store(int32(Restoring))
	r.restoringNow.Store(true)
	w.restoredAt = now
	w.noteStuck(now.Add(bound - time.Second))
	if r.Stuck() != nil {
		t.Fatalf("restoring, nothing restored for less than %v: %v", bound, r.Stuck())
	}
	w.noteStuck(now.Add(bound))
	if err := r.Stuck(); err == nil || !strings.Contains(err.Error(), "nothing has been restored for 25s") {
		t.Fatalf("restoring, nothing restored for %v: %v", bound, err)
	}
	r.state.Store(int32(Running))
	w.noteStuck(now.Add(2 * bound))
	if r.Stuck() != nil {
		t.Fatalf("running: %v", r.Stuck())
	}
}
