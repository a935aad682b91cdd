package runtime

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine/internal/assign"
)

// A group that cannot be joined because a topic is missing from the
// leader's metadata (just created, not everywhere yet) is retried for
// unknownTopicPatience, then fails the instance; other fetch errors that
// are not retriable fail it at once.
func TestFetchErrorsUnknownTopicIsTransient(t *testing.T) {
	now := time.Unix(1000, 0)
	r := &Runtime{cfg: Config{Now: func() time.Time { return now }}, log: slog.New(slog.DiscardHandler)}
	joinErr := kgo.Fetches{{Topics: []kgo.FetchTopic{{Partitions: []kgo.FetchPartition{{Err: &kgo.ErrGroupSession{Err: fmt.Errorf("%w: sub-topology 1 reads topic %q", assign.ErrUnknownTopic, "x-repartition")}}}}}}}
	if err := r.fetchErrors(joinErr, "fetch"); err != nil {
		t.Fatalf("first join failure: %v", err)
	}
	now = now.Add(unknownTopicPatience - time.Second)
	if err := r.fetchErrors(joinErr, "fetch"); err != nil {
		t.Fatalf("within the patience: %v", err)
	}
	now = now.Add(2 * time.Second)
	if err := r.fetchErrors(joinErr, "fetch"); err == nil {
		t.Fatal("still no error after the patience ran out")
	}
	// A poll without the error starts the patience over.
	if err := r.fetchErrors(kgo.Fetches{}, "fetch"); err != nil {
		t.Fatal(err)
	}
	if err := r.fetchErrors(joinErr, "fetch"); err != nil {
		t.Fatalf("after a clean poll: %v", err)
	}
	other := kgo.Fetches{{Topics: []kgo.FetchTopic{{Topic: "t", Partitions: []kgo.FetchPartition{{Err: fmt.Errorf("boom")}}}}}}
	if err := r.fetchErrors(other, "fetch"); err == nil {
		t.Fatal("a non-retriable error passed")
	}
}
