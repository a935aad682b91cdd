package versions_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
	"github.com/oxbow-dev/oxbow/versions"
)

// Retire deletes every internal topic of the version that the broker has,
// also one created a moment after the control last listed the topics
// (which its client's metadata cache would still answer for seconds).
func TestRetireSeesTopicsCreatedAMomentAgo(t *testing.T) {
	env := kafkaenv.ForTest(t)
	ctx := context.Background()
	app := fmt.Sprintf("late%d", time.Now().UnixNano())
	ctl, err := versions.New(env.Brokers, versions.Options{Topic: app + "-control"})
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	if err := ctl.Register(ctx, app, "v1", []string{app + "-orders"}); err != nil {
		t.Fatal(err)
	}
	group := versions.Group(app, "v1")
	first, second := group+"-counts-changelog", group+"-by-shoe-repartition"
	env.CreateTopics(t, 1, first)
	dry := versions.RetireOptions{DryRun: true, StateRoots: []string{t.TempDir()}}
	plan, err := ctl.Retire(ctx, app, "v1", dry)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(plan.Topics, []string{first}) {
		t.Fatalf("before: the plan deletes %v, want [%s]", plan.Topics, first)
	}

	env.CreateTopics(t, 1, second)
	plan, err = ctl.Retire(ctx, app, "v1", dry)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{second, first}; !slices.Equal(plan.Topics, want) {
		t.Fatalf("a topic created a moment after the last listing: the plan deletes %v, want %v", plan.Topics, want)
	}
	plan, err = ctl.Retire(ctx, app, "v1", versions.RetireOptions{StateRoots: dry.StateRoots})
	if err != nil || !plan.Done {
		t.Fatalf("retired: %+v, %v", plan, err)
	}
}
