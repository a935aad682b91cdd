package versions

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/oxbow-dev/oxbow/engine"
)

// DefaultMaxLag is how many records behind its inputs a version may be
// and still be promoted without force.
const DefaultMaxLag = 100

// NotCaughtUpError refuses the promotion of a version that is behind.
type NotCaughtUpError struct {
	Lag    Lag
	MaxLag int64
}

func (e *NotCaughtUpError) Error() string {
	return fmt.Sprintf("versions: %s %s has not caught up: %d records behind (at most %d to promote; %.1f%% done); wait, or force it",
		e.Lag.App, e.Lag.Version, e.Lag.Total, e.MaxLag, 100*e.Lag.Progress())
}

// PromoteOptions tune Promote.
type PromoteOptions struct {
	// Force promotes a version whatever its lag.
	Force bool
	// MaxLag is the lag a version may have and be promoted (default
	// DefaultMaxLag).
	MaxLag int64
}

// Promote makes a version the application's active one: the one its
// readers are served (every Watcher sees it within moments). A version
// that has not caught up with its inputs is refused with a
// *NotCaughtUpError unless forced. Promoting the active version again does
// nothing.
func (c *Control) Promote(ctx context.Context, app, version string, o PromoteOptions) error {
	a, err := c.App(ctx, app)
	if err != nil {
		return err
	}
	if _, ok := a.Versions[version]; !ok {
		return notRegistered(a, version)
	}
	if a.Active == version {
		return nil
	}
	if o.MaxLag <= 0 {
		o.MaxLag = DefaultMaxLag
	}
	if !o.Force {
		l, err := c.Lag(ctx, app, version)
		if err != nil {
			return err
		}
		if !l.CaughtUp(o.MaxLag) {
			return &NotCaughtUpError{Lag: l, MaxLag: o.MaxLag}
		}
	}
	return c.write(ctx, activeKey(app), promotion{Active: version, Previous: a.Active, PromotedAt: time.Now().UTC(), Forced: o.Force})
}

// PromoteIfNone promotes a registered version if the application has no
// active version yet, whatever its lag: the first version of an
// application to run is the one its readers have (an instance calls it
// when it starts, after RegisterApp). It reports whether it promoted.
// Two versions starting at once, both first, race: the later write wins.
func (c *Control) PromoteIfNone(ctx context.Context, app, version string) (bool, error) {
	a, err := c.App(ctx, app)
	if err != nil {
		return false, err
	}
	if a.Active != "" {
		return false, nil
	}
	if _, ok := a.Versions[version]; !ok {
		return false, notRegistered(a, version)
	}
	return true, c.write(ctx, activeKey(app), promotion{Active: version, PromotedAt: time.Now().UTC()})
}

// Rollback promotes the version that was active before the active one,
// which must still be registered. It is forced: the previous version was
// serving until the promotion and has kept up since, unless stopped.
func (c *Control) Rollback(ctx context.Context, app string) (string, error) {
	a, err := c.App(ctx, app)
	if err != nil {
		return "", err
	}
	if _, err := a.RollbackTo(); err != nil {
		return "", err
	}
	return a.Previous, c.write(ctx, activeKey(app), promotion{Active: a.Previous, Previous: a.Active, PromotedAt: time.Now().UTC(), Forced: true})
}

// Plan is what Retire or Reset does, or would do with DryRun.
type Plan struct {
	App, Version, Group string
	// Topics are the internal topics deleted.
	Topics []string
	// Dirs are the local state directories deleted.
	Dirs []string
	// Offsets are the inputs' offsets set (Reset).
	Offsets []PartitionLag
	// Done: carried out (false with DryRun).
	Done bool
}

// RetireOptions tune Retire.
type RetireOptions struct {
	// DryRun says what would be deleted, deleting nothing.
	DryRun bool
	// StateRoots are directories under which instances keep their state
	// in a directory named after the group (the engine's default root is
	// <os.TempDir()>/oxbow, which is always looked in).
	StateRoots []string
}

// Retire deletes a version: its consumer group, its internal topics, its
// local state under the state roots on this machine, and its registration.
// The active version cannot be retired, nor one whose instances are still
// running.
func (c *Control) Retire(ctx context.Context, app, version string, o RetireOptions) (Plan, error) {
	a, err := c.App(ctx, app)
	if err != nil {
		return Plan{}, err
	}
	v, ok := a.Versions[version]
	if !ok {
		return Plan{}, notRegistered(a, version)
	}
	if a.Active == version {
		return Plan{}, fmt.Errorf("versions: %s is %s's active version; promote another first (or delete the application: Delete)", version, app)
	}
	p, err := c.retirePlan(ctx, a, v, o.StateRoots)
	if err != nil || o.DryRun {
		return p, err
	}
	return p, c.retire(ctx, &p)
}

// retirePlan is what retiring v would delete, refused while it runs.
func (c *Control) retirePlan(ctx context.Context, a *App, v Version, roots []string) (Plan, error) {
	p := Plan{App: a.App, Version: v.Version, Group: v.Group}
	if err := c.stopped(ctx, v.Group); err != nil {
		return p, err
	}
	var err error
	if p.Topics, err = c.internalTopics(ctx, a, v.Group); err != nil {
		return p, err
	}
	p.Dirs = stateDirs(v.Group, roots)
	return p, nil
}

// retire carries out a retirement's plan, its registration last.
func (c *Control) retire(ctx context.Context, p *Plan) error {
	if err := c.deleteTopics(ctx, p.Topics); err != nil {
		return err
	}
	if _, err := c.adm.DeleteGroup(ctx, p.Group); err != nil && !isGroupGone(err) {
		return fmt.Errorf("versions: deleting the group %s: %w", p.Group, err)
	}
	if err := removeDirs(p.Dirs); err != nil {
		return err
	}
	if err := c.write(ctx, versionKey(p.App, p.Version), nil); err != nil {
		return err
	}
	p.Done = true
	return nil
}

// DeleteOptions tune Delete.
type DeleteOptions struct {
	// DryRun says what would be deleted, deleting nothing.
	DryRun     bool
	StateRoots []string // as RetireOptions.StateRoots
}

// Delete removes an application: every registered version as Retire
// does (its group, internal topics, local state under the state roots and
// registration), the active one included, then its promotion, so that
// the control topic no longer has it. None of its versions may be
// running; a failure part way leaves what is not deleted yet registered,
// and Delete can be run again.
func (c *Control) Delete(ctx context.Context, app string, o DeleteOptions) ([]Plan, error) {
	a, err := c.App(ctx, app)
	if err != nil {
		return nil, err
	}
	var plans []Plan
	for _, name := range a.Names() { // all checked before anything goes
		p, err := c.retirePlan(ctx, a, a.Versions[name], o.StateRoots)
		if err != nil {
			return plans, err
		}
		plans = append(plans, p)
	}
	if o.DryRun {
		return plans, nil
	}
	for i := range plans {
		if err := c.retire(ctx, &plans[i]); err != nil {
			return plans, err
		}
	}
	return plans, c.write(ctx, activeKey(app), nil)
}

// ResetOptions tune Reset.
type ResetOptions struct {
	// To is the time the inputs are read again from (the first offset at
	// or after it); zero: from the earliest offsets.
	To time.Time
	// DryRun says what would be done, doing nothing.
	DryRun     bool
	StateRoots []string // as RetireOptions.StateRoots
}

// Reset makes a version process its inputs again, in place (as Kafka
// Streams' reset tool does): the group's offsets on its inputs are set to
// the earliest ones or to a time, its internal topics (and the group's
// offsets on them) deleted, its local state under the state roots wiped.
// Its instances must be stopped.
func (c *Control) Reset(ctx context.Context, app, version string, o ResetOptions) (Plan, error) {
	a, err := c.App(ctx, app)
	if err != nil {
		return Plan{}, err
	}
	v, ok := a.Versions[version]
	if !ok {
		return Plan{}, notRegistered(a, version)
	}
	p := Plan{App: app, Version: version, Group: v.Group}
	if err := c.stopped(ctx, v.Group); err != nil {
		return p, err
	}
	if p.Topics, err = c.internalTopics(ctx, a, v.Group); err != nil {
		return p, err
	}
	p.Dirs = stateDirs(v.Group, o.StateRoots)
	var offsets kadm.ListedOffsets
	if o.To.IsZero() {
		offsets, err = c.adm.ListStartOffsets(ctx, v.Inputs...)
	} else {
		offsets, err = c.adm.ListOffsetsAfterMilli(ctx, o.To.UnixMilli(), v.Inputs...)
	}
	if err != nil {
		return p, fmt.Errorf("versions: the inputs' offsets: %w", err)
	}
	if err := offsets.Error(); err != nil {
		return p, fmt.Errorf("versions: the inputs' offsets: %w", err)
	}
	commit := kadm.Offsets{}
	offsets.Each(func(lo kadm.ListedOffset) {
		commit.Add(kadm.Offset{Topic: lo.Topic, Partition: lo.Partition, At: lo.Offset, LeaderEpoch: -1})
		p.Offsets = append(p.Offsets, PartitionLag{Topic: lo.Topic, Partition: lo.Partition, Committed: lo.Offset})
	})
	slices.SortFunc(p.Offsets, func(a, b PartitionLag) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition - b.Partition)
	})
	if o.DryRun {
		return p, nil
	}
	// The group's offsets on the internal topics go with them.
	if len(p.Topics) > 0 {
		ts := kadm.TopicsSet{}
		for _, t := range p.Topics {
			ts.Add(t)
		}
		if _, err := c.adm.DeleteOffsets(ctx, v.Group, ts); err != nil && !isGroupGone(err) {
			return p, fmt.Errorf("versions: deleting %s's offsets on its internal topics: %w", v.Group, err)
		}
	}
	if err := c.deleteTopics(ctx, p.Topics); err != nil {
		return p, err
	}
	res, err := c.adm.CommitOffsets(ctx, v.Group, commit)
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		return p, fmt.Errorf("versions: setting %s's offsets: %w", v.Group, err)
	}
	if err := removeDirs(p.Dirs); err != nil {
		return p, err
	}
	p.Done = true
	return p, nil
}

// stopped fails unless the group has no live members.
func (c *Control) stopped(ctx context.Context, group string) error {
	d, err := c.adm.DescribeGroups(ctx, group)
	if err != nil && !isGroupGone(err) {
		return fmt.Errorf("versions: describing %s: %w", group, err)
	}
	if g, ok := d[group]; ok && len(g.Members) > 0 {
		return fmt.Errorf("versions: %s still has %d running instance(s) (group state %s); stop them first (an instance with a stable InstanceID that stopped without leaving, engine.Config.LeaveGroupOnClose, stays a member for its session timeout)", group, len(g.Members), g.State)
	}
	return nil
}

// internalTopics lists a group's internal topics: those named
// "<group>-…-changelog" or "…-repartition" (or another internal suffix)
// that no other registered version's longer group name claims.
//
// It asks the broker, not the client's metadata cache: kadm's ListTopics
// answers from a listing up to 5 s old (franz-go's MetadataMinAge), which
// may predate a changelog the version created a moment before it
// stopped; what deletes a version's topics must see all of them.
func (c *Control) internalTopics(ctx context.Context, a *App, group string) ([]string, error) {
	names, err := c.topicNames(ctx)
	if err != nil {
		return nil, err
	}
	var others []string
	for _, v := range a.Versions {
		if v.Group != group && strings.HasPrefix(v.Group, group+"-") {
			others = append(others, v.Group+"-")
		}
	}
	var out []string
	for _, t := range names {
		if !strings.HasPrefix(t, group+"-") || !engine.HasInternalSuffix(t) {
			continue
		}
		if slices.ContainsFunc(others, func(p string) bool { return strings.HasPrefix(t, p) }) {
			continue
		}
		out = append(out, t)
	}
	slices.Sort(out)
	return out, nil
}

// topicNames lists the cluster's topics (Kafka's own internal ones
// excepted) with a metadata request of its own, past the client's cache.
func (c *Control) topicNames(ctx context.Context) ([]string, error) {
	req := kmsg.NewPtrMetadataRequest() // no topics named: all of them
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return nil, fmt.Errorf("versions: listing topics: %w", err)
	}
	var names []string
	for _, t := range resp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); errors.Is(err, kerr.TopicAuthorizationFailed) {
			return nil, fmt.Errorf("versions: listing topics: %w", err)
		}
		if t.Topic == nil || t.IsInternal {
			continue
		}
		names = append(names, *t.Topic)
	}
	slices.Sort(names)
	return names, nil
}

func (c *Control) deleteTopics(ctx context.Context, topics []string) error {
	if len(topics) == 0 {
		return nil
	}
	res, err := c.adm.DeleteTopics(ctx, topics...)
	if err != nil {
		return fmt.Errorf("versions: deleting topics: %w", err)
	}
	var errs []error
	for _, r := range res.Sorted() {
		if r.Err != nil && !isTopicGone(r.Err) {
			errs = append(errs, fmt.Errorf("%s: %w", r.Topic, r.Err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("versions: deleting topics: %w", errors.Join(errs...))
	}
	return nil
}

// stateDirs are the group's state directories under the roots that exist.
func stateDirs(group string, roots []string) []string {
	roots = append(slices.Clone(roots), engine.DefaultStateRoot())
	var out []string
	for _, r := range roots {
		d := filepath.Join(r, group)
		if fi, err := os.Stat(d); err == nil && fi.IsDir() && !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

func removeDirs(dirs []string) error {
	for _, d := range dirs {
		if err := os.RemoveAll(d); err != nil {
			return fmt.Errorf("versions: removing %s: %w", d, err)
		}
	}
	return nil
}

func isGroupGone(err error) bool {
	return errors.Is(err, kerr.GroupIDNotFound)
}

func isTopicGone(err error) bool {
	return errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.UnknownTopicID)
}
