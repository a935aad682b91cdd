package versions

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/oxbow-dev/oxbow/engine/hanging"
)

// Lag is how far a version's consumer group is behind its inputs.
type Lag struct {
	App, Version, Group string
	// State is the group's state (Stable, Empty, PreparingRebalance, ...,
	// Dead when it has never committed), Members its live instances.
	State   string
	Members int
	// Partitions are the inputs' partitions, by topic then partition.
	Partitions []PartitionLag
	// Total is the records between the committed offsets and the ends;
	// Consumed the records from the starts to the committed offsets.
	Total, Consumed int64
}

// PartitionLag is one input partition's lag.
type PartitionLag struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Committed is the group's committed offset, -1 if it has none (it
	// will read from Start).
	Committed int64 `json:"committed"`
	Start     int64 `json:"start"`
	End       int64 `json:"end"`
	Lag       int64 `json:"lag"`
	// Unsettled is the records past the partition's last stable offset,
	// which a transaction still open there holds from every read-committed
	// reader. Brief under exactly-once load; lasting past the producer's
	// transaction timeout, a transaction Kafka left open.
	Unsettled int64 `json:"unsettled,omitempty"`
	// Held is whether the group's offset there is held by a transaction
	// that committed it and has not ended: until it ends, no member of the
	// group can start on the partition (its coordinator answers
	// UNSTABLE_OFFSET_COMMIT).
	Held bool `json:"held,omitempty"`
}

// Waits says what the group's progress waits on in Kafka at the time of
// the measurement: the partitions whose offsets an open transaction holds
// and those with records past their last stable offset. Empty if none.
func (l Lag) Waits() string {
	var held, unsettled []string
	for _, p := range l.Partitions {
		if p.Held {
			held = append(held, fmt.Sprintf("%s[%d]", p.Topic, p.Partition))
		}
		if p.Unsettled > 0 {
			unsettled = append(unsettled, fmt.Sprintf("%s[%d] (%d)", p.Topic, p.Partition, p.Unsettled))
		}
	}
	var says []string
	if len(held) > 0 {
		says = append(says, "offsets held by an open transaction on "+fewOf(held))
	}
	if len(unsettled) > 0 {
		says = append(says, "records past the last stable offset on "+fewOf(unsettled))
	}
	return strings.Join(says, "; ")
}

// fewOf lists items, the first five and how many more.
func fewOf(items []string) string {
	if len(items) > 5 {
		items = append(items[:5:5], fmt.Sprintf("and %d more", len(items)-5))
	}
	return strings.Join(items, ", ")
}

// CaughtUp reports whether the group has committed on every input
// partition and is at most maxLag records behind in all.
func (l Lag) CaughtUp(maxLag int64) bool {
	if len(l.Partitions) == 0 {
		return false
	}
	for _, p := range l.Partitions {
		if p.Committed < 0 && p.End > p.Start {
			return false
		}
	}
	return l.Total <= maxLag
}

// Progress is the share of the inputs' records (from their starts) the
// group has consumed, from 0 to 1.
func (l Lag) Progress() float64 {
	if l.Consumed+l.Total == 0 {
		return 1
	}
	return float64(l.Consumed) / float64(l.Consumed+l.Total)
}

// Lag measures a registered version's lag on its inputs.
func (c *Control) Lag(ctx context.Context, app, version string) (Lag, error) {
	a, err := c.App(ctx, app)
	if err != nil {
		return Lag{}, err
	}
	v, ok := a.Versions[version]
	if !ok {
		return Lag{}, notRegistered(a, version)
	}
	return c.groupLag(ctx, app, version, v.Group, v.Inputs)
}

// Lags measures every registered version's lag on its inputs, reading the
// control topic once: by version, each with its error if it could not be
// measured.
func (c *Control) Lags(ctx context.Context, app string) (map[string]Lag, map[string]error, error) {
	a, err := c.App(ctx, app)
	if err != nil {
		return nil, nil, err
	}
	lags, errs := c.LagsOf(ctx, a)
	return lags, errs, nil
}

// LagsOf is Lags of an application already read (App).
func (c *Control) LagsOf(ctx context.Context, a *App) (map[string]Lag, map[string]error) {
	lags, errs := map[string]Lag{}, map[string]error{}
	for name, v := range a.Versions {
		if l, err := c.groupLag(ctx, a.App, name, v.Group, v.Inputs); err != nil {
			errs[name] = err
		} else {
			lags[name] = l
		}
	}
	return lags, errs
}

// ErrNotRegistered is what errors.Is finds in the error of an operation
// on a version the control topic does not have: never registered, or
// retired.
var ErrNotRegistered = errors.New("versions: not a registered version")

// unregisteredError is an operation's error on such a version.
type unregisteredError struct{ msg string }

func (e *unregisteredError) Error() string        { return e.msg }
func (e *unregisteredError) Is(target error) bool { return target == ErrNotRegistered }

func notRegistered(a *App, version string) error {
	if len(a.Versions) == 0 {
		return &unregisteredError{fmt.Sprintf("versions: %s has no registered versions (an instance registers its version when it starts)", a.App)}
	}
	return &unregisteredError{fmt.Sprintf("versions: %s has no version %q (it has %s)", a.App, version, strings.Join(a.Names(), ", "))}
}

// groupLag measures a group's lag on topics.
func (c *Control) groupLag(ctx context.Context, app, version, group string, inputs []string) (Lag, error) {
	l := Lag{App: app, Version: version, Group: group}
	if len(inputs) == 0 {
		return l, fmt.Errorf("versions: %s has no inputs to measure", group)
	}
	l.State = "Dead" // a group that has never been
	described, err := c.adm.DescribeGroups(ctx, group)
	if err != nil && !isGroupGone(err) {
		return l, fmt.Errorf("versions: describing %s: %w", group, err)
	}
	if d, ok := described[group]; ok && d.Err == nil {
		l.State, l.Members = d.State, len(d.Members)
	}
	starts, err := c.adm.ListStartOffsets(ctx, inputs...)
	if err != nil {
		return l, fmt.Errorf("versions: the starts of %v: %w", inputs, err)
	}
	ends, err := c.adm.ListEndOffsets(ctx, inputs...)
	if err != nil {
		return l, fmt.Errorf("versions: the ends of %v: %w", inputs, err)
	}
	stable, err := c.adm.ListCommittedOffsets(ctx, inputs...)
	if err != nil {
		return l, fmt.Errorf("versions: the last stable offsets of %v: %w", inputs, err)
	}
	committed, err := c.adm.FetchOffsetsForTopics(ctx, group, inputs...)
	if err != nil && !isGroupGone(err) {
		return l, fmt.Errorf("versions: the offsets of %s: %w", group, err)
	}
	// Fetched as a member fetches them, requiring stable offsets, they
	// show which an open transaction holds (the fetch above gives the
	// offsets committed before it).
	_, held, err := hanging.GroupOffsets(ctx, c.cl, group, ends.Offsets().TopicsSet())
	if err != nil && !isGroupGone(err) {
		return l, fmt.Errorf("versions: the offsets of %s: %w", group, err)
	}
	var errs []error
	ends.Each(func(e kadm.ListedOffset) {
		if e.Err != nil {
			errs = append(errs, fmt.Errorf("%s[%d]: %w", e.Topic, e.Partition, e.Err))
			return
		}
		p := PartitionLag{Topic: e.Topic, Partition: e.Partition, Committed: -1, End: e.Offset}
		if s, ok := starts.Lookup(e.Topic, e.Partition); ok && s.Err == nil {
			p.Start = s.Offset
		}
		from := p.Start
		if o, ok := committed.Lookup(e.Topic, e.Partition); ok && o.Err == nil && o.At >= 0 {
			p.Committed, from = o.At, o.At
		}
		p.Held = held.Lookup(e.Topic, e.Partition)
		if lso, ok := stable.Lookup(e.Topic, e.Partition); ok && lso.Err == nil {
			p.Unsettled = max(p.End-lso.Offset, 0)
		}
		p.Lag = max(p.End-from, 0)
		l.Total += p.Lag
		l.Consumed += max(from-p.Start, 0)
		l.Partitions = append(l.Partitions, p)
	})
	if len(errs) > 0 {
		return l, fmt.Errorf("versions: the ends of %s's inputs: %w", group, errors.Join(errs...))
	}
	slices.SortFunc(l.Partitions, func(a, b PartitionLag) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition - b.Partition)
	})
	return l, nil
}
