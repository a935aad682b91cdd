package engine_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/internal/await"
)

func TestNames(t *testing.T) {
	for _, c := range []struct {
		n                 engine.Names
		group, changelog  string
		internal, notOurs string
	}{
		{engine.Names{AppID: "shop"}, "shop", "shop-counts-changelog", "shop-by-word-repartition", "shop.public.catalog"},
		{engine.Names{AppID: "shop", Version: "v2"}, "shop-v2", "shop-v2-counts-changelog", "shop-v2-fk-subscription", "shop-counts-changelog"},
	} {
		if g := c.n.Group(); g != c.group {
			t.Errorf("%+v: group %q, want %q", c.n, g, c.group)
		}
		if ch := c.n.ChangelogTopic("counts"); ch != c.changelog {
			t.Errorf("%+v: changelog %q, want %q", c.n, ch, c.changelog)
		}
		if !c.n.IsInternalTopic(c.internal) || c.n.IsInternalTopic(c.notOurs) {
			t.Errorf("%+v: IsInternalTopic(%q) = %v, (%q) = %v", c.n, c.internal, c.n.IsInternalTopic(c.internal), c.notOurs, c.n.IsInternalTopic(c.notOurs))
		}
		if d := c.n.StateDir("i1"); d != filepath.Join(engine.DefaultStateRoot(), c.group, "i1") {
			t.Errorf("%+v: state dir %q", c.n, d)
		}
	}
}

// A versioned application's changelogs carry its group, as the runtime
// creates them (a change feed follows App.ChangelogTopic).
func TestChangelogTopicOfAVersion(t *testing.T) {
	k := newKT(t)
	in := k.topic("words")
	k.create(1, in)
	top := twoHops(in)
	a := k.start(top, engine.Config{AppID: k.prefix, Version: "v2"})
	topic, err := a.ChangelogTopic("counts")
	if err != nil {
		t.Fatal(err)
	}
	if want := k.prefix + "-v2-counts-changelog"; topic != want {
		t.Fatalf("ChangelogTopic = %q, want %q", topic, want)
	}
	await.Until(t, 60*time.Second, "the changelog to exist", func() bool {
		k.checkApps()
		d, err := k.adm.ListTopics(context.Background(), topic)
		return err == nil && d.Has(topic) && d[topic].Err == nil
	})
}
