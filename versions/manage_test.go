package versions_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
	"github.com/oxbow-dev/oxbow/internal/await"
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

// Delete removes every version of an application, the active one too,
// with their topics, groups and state, and then the application; not
// while one of its versions has a running instance.
func TestDeleteApplication(t *testing.T) {
	env := kafkaenv.ForTest(t)
	ctx := context.Background()
	app := fmt.Sprintf("gone%d", time.Now().UnixNano())
	ctl, err := versions.New(env.Brokers, versions.Options{Topic: app + "-control"})
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	root := t.TempDir()
	var topics []string
	for _, v := range []string{"v1", "v2"} {
		if err := ctl.Register(ctx, app, v, []string{app + "-orders"}); err != nil {
			t.Fatal(err)
		}
		topics = append(topics, versions.Group(app, v)+"-counts-changelog")
		if err := os.MkdirAll(filepath.Join(root, versions.Group(app, v), "0_0"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	env.CreateTopics(t, 1, topics...)
	if err := ctl.Promote(ctx, app, "v2", versions.PromoteOptions{Force: true}); err != nil {
		t.Fatal(err)
	}

	// A running instance of v1: a member of its group.
	member, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...), kgo.ConsumerGroup(versions.Group(app, "v1")), kgo.ConsumeTopics(topics[0]))
	if err != nil {
		t.Fatal(err)
	}
	await.NoError(t, time.Minute, "v1's instance in its group", func() error {
		member.PollFetches(ctxTimeout(t, 100*time.Millisecond))
		_, err := ctl.Delete(ctx, app, versions.DeleteOptions{DryRun: true, StateRoots: []string{root}})
		if err == nil || !strings.Contains(err.Error(), "running instance") {
			return fmt.Errorf("delete with v1 running: %v", err)
		}
		return nil
	})
	member.Close()

	var plans []versions.Plan
	await.NoError(t, time.Minute, "v1's instance gone", func() error {
		plans, err = ctl.Delete(ctx, app, versions.DeleteOptions{DryRun: true, StateRoots: []string{root}})
		return err
	})
	if len(plans) != 2 || plans[0].Version != "v1" || plans[1].Version != "v2" || plans[1].Done ||
		!slices.Equal(plans[0].Topics, topics[:1]) || !slices.Equal(plans[1].Topics, topics[1:]) || len(plans[1].Dirs) != 1 {
		t.Fatalf("the dry run's plans: %+v", plans)
	}
	if plans, err = ctl.Delete(ctx, app, versions.DeleteOptions{StateRoots: []string{root}}); err != nil || !plans[0].Done || !plans[1].Done {
		t.Fatalf("deleted: %+v, %v", plans, err)
	}
	if _, err := ctl.App(ctx, app); !errors.Is(err, versions.ErrUnknownApp) {
		t.Errorf("the application after its deletion: %v, want ErrUnknownApp", err)
	}
	for _, v := range []string{"v1", "v2"} {
		if _, err := os.Stat(filepath.Join(root, versions.Group(app, v))); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s's state: %v", v, err)
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	await.NoError(t, time.Minute, "the topics gone", func() error {
		td, err := kadm.NewClient(cl).ListTopics(ctx, topics...)
		if err != nil {
			return err
		}
		for _, d := range td {
			if d.Err == nil {
				return fmt.Errorf("%s is still there", d.Topic)
			}
		}
		return nil
	})
	groups, err := kadm.NewClient(cl).ListGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"v1", "v2"} {
		if slices.Contains(groups.Groups(), versions.Group(app, v)) {
			t.Errorf("%s's group is still there", v)
		}
	}
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
