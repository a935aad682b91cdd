package versions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/kafkasec"
)

// DefaultTopic is the control topic's name unless Options say another.
const DefaultTopic = "oxbow-control"

// Options configure a Control.
type Options struct {
	// Topic is the control topic (default DefaultTopic). What writes to
	// it (Register, Promote…) and a Watcher create it, compacted and with
	// one partition, when missing; what only reads creates nothing.
	Topic string
	// KafkaSecurity is how to reach secured brokers (TLS, SASL);
	// KafkaOptions are more options for the Kafka client, after it.
	KafkaSecurity kafkasec.Config
	KafkaOptions  []kgo.Opt
}

// Control reads and writes the control topic, and looks at and manages
// the versions' consumer groups, topics and state. It is safe for
// concurrent use. Close it when done.
type Control struct {
	cl    *kgo.Client
	adm   *kadm.Client
	topic string
	opts  []kgo.Opt
}

// New connects to the brokers.
func New(brokers []string, o Options) (*Control, error) {
	if len(brokers) == 0 {
		return nil, errors.New("versions: no brokers")
	}
	if o.Topic == "" {
		o.Topic = DefaultTopic
	}
	opts, err := o.KafkaSecurity.ClientOpts(brokers, o.KafkaOptions...)
	if err != nil {
		return nil, fmt.Errorf("versions: %w", err)
	}
	cl, err := kgo.NewClient(append(slices.Clone(opts), kgo.RequiredAcks(kgo.AllISRAcks()))...)
	if err != nil {
		return nil, fmt.Errorf("versions: %w", err)
	}
	return &Control{cl: cl, adm: kadm.NewClient(cl), topic: o.Topic, opts: opts}, nil
}

// Check reports a *kafkasec.RefusedError if the cluster refuses the
// client (an untrusted certificate, a wrong password), which its requests
// would otherwise retry until their context ends.
func (c *Control) Check(ctx context.Context) error { return kafkasec.Check(ctx, c.cl) }

// Close closes the Kafka client.
func (c *Control) Close() { c.cl.Close() }

// Topic is the control topic's name.
func (c *Control) Topic() string { return c.topic }

// Version is a registered version of an application.
type Version struct {
	App     string `json:"app"`
	Version string `json:"version"`
	// Group is its consumer group and the prefix of its internal topics.
	Group string `json:"group"`
	// Inputs are the topics its lag is measured on (the topology's source
	// topics).
	Inputs     []string  `json:"inputs"`
	Registered time.Time `json:"registered"`
}

// App is an application's versions and which of them is active.
type App struct {
	App string `json:"app"`
	// Active is the version readers are served; Previous the one active
	// before it (what Rollback goes back to). "" if none was promoted.
	Active     string    `json:"active,omitempty"`
	Previous   string    `json:"previous,omitempty"`
	PromotedAt time.Time `json:"promotedAt,omitzero"`
	Forced     bool      `json:"forced,omitempty"`
	// Versions are the registered versions, by name.
	Versions map[string]Version `json:"versions"`
}

// RollbackTo is the version Rollback would make active, or why there is
// none: no version was active before the active one, or it is retired.
func (a App) RollbackTo() (string, error) {
	if a.Previous == "" {
		return "", fmt.Errorf("versions: %s has no previous version to roll back to", a.App)
	}
	if _, ok := a.Versions[a.Previous]; !ok {
		return "", fmt.Errorf("versions: %s's previous version %s is retired", a.App, a.Previous)
	}
	return a.Previous, nil
}

// Names lists the versions' names, sorted.
func (a App) Names() []string {
	out := make([]string, 0, len(a.Versions))
	for v := range a.Versions {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}

// The control topic's records: "active/<app>" holds an app's promotion,
// "version/<app>/<version>" a registered version (a tombstone once retired).
func activeKey(app string) string           { return "active/" + app }
func versionKey(app, version string) string { return "version/" + app + "/" + version }

type promotion struct {
	Active     string    `json:"active"`
	Previous   string    `json:"previous,omitempty"`
	PromotedAt time.Time `json:"promotedAt"`
	Forced     bool      `json:"forced,omitempty"`
}

// Group is the consumer group of an application's version, as the
// engine names it (engine.App.Group).
func Group(app, version string) string {
	return engine.Names{AppID: app, Version: version}.Group()
}

// ensureTopic creates the control topic if it is missing.
func (c *Control) ensureTopic(ctx context.Context) error {
	compact := "compact"
	res, err := c.adm.CreateTopic(ctx, 1, -1, map[string]*string{"cleanup.policy": &compact}, c.topic)
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("versions: creating %s: %w", c.topic, err)
	}
	if res.Err != nil && !errors.Is(res.Err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("versions: creating %s: %w", c.topic, res.Err)
	}
	return nil
}

func (c *Control) write(ctx context.Context, key string, value any) error {
	if err := c.ensureTopic(ctx); err != nil {
		return err
	}
	r := &kgo.Record{Topic: c.topic, Partition: 0, Key: []byte(key)}
	if value != nil {
		b, err := json.Marshal(value)
		if err != nil {
			return err
		}
		r.Value = b
	}
	if err := c.cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		return fmt.Errorf("versions: writing to %s: %w", c.topic, err)
	}
	return nil
}

// Register records a version of an application with the topics its lag
// is measured on. Registering again updates it.
func (c *Control) Register(ctx context.Context, app, version string, inputs []string) error {
	if app == "" || version == "" {
		return errors.New("versions: Register needs an application and a version")
	}
	return c.write(ctx, versionKey(app, version), Version{App: app, Version: version, Group: Group(app, version), Inputs: slices.Sorted(slices.Values(inputs)), Registered: time.Now().UTC()})
}

// RegisterApp registers a running instance's version: its AppID, Version
// and the topology's source topics. The instance's Config must have a
// Version.
func (c *Control) RegisterApp(ctx context.Context, a *engine.App, t *engine.Topology) error {
	if a.Version() == "" {
		return fmt.Errorf("versions: the application %s has no Version to register", a.AppID())
	}
	return c.Register(ctx, a.AppID(), a.Version(), t.SourceTopics())
}

// Apps reads the control topic: every application's versions and
// promotion.
// It creates nothing: without a control topic there are none.
func (c *Control) Apps(ctx context.Context) (map[string]*App, error) {
	apps := map[string]*App{}
	if ok, err := c.topicExists(ctx); err != nil || !ok {
		return apps, err
	}
	get := func(name string) *App {
		a := apps[name]
		if a == nil {
			a = &App{App: name, Versions: map[string]Version{}}
			apps[name] = a
		}
		return a
	}
	err := readAll(ctx, c.opts, c.adm, c.topic, func(r *kgo.Record) {
		applyRecord(r, get)
	})
	if err != nil {
		return nil, err
	}
	maps.DeleteFunc(apps, func(_ string, a *App) bool {
		return len(a.Versions) == 0 && a.Active == "" // deleted (Delete)
	})
	return apps, nil
}

// applyRecord applies a control record to the applications.
func applyRecord(r *kgo.Record, get func(string) *App) {
	key := string(r.Key)
	switch {
	case strings.HasPrefix(key, "active/"):
		a := get(strings.TrimPrefix(key, "active/"))
		var p promotion
		if r.Value == nil || json.Unmarshal(r.Value, &p) != nil {
			a.Active, a.Previous, a.PromotedAt, a.Forced = "", "", time.Time{}, false
			return
		}
		a.Active, a.Previous, a.PromotedAt, a.Forced = p.Active, p.Previous, p.PromotedAt, p.Forced
	case strings.HasPrefix(key, "version/"):
		rest := strings.TrimPrefix(key, "version/")
		i := strings.LastIndexByte(rest, '/')
		if i < 0 {
			return
		}
		a := get(rest[:i])
		var v Version
		if r.Value == nil || json.Unmarshal(r.Value, &v) != nil {
			delete(a.Versions, rest[i+1:])
			return
		}
		a.Versions[v.Version] = v
	}
}

// App reads one application's versions and promotion.
func (c *Control) App(ctx context.Context, app string) (*App, error) {
	apps, err := c.Apps(ctx)
	if err != nil {
		return nil, err
	}
	if a := apps[app]; a != nil {
		return a, nil
	}
	known := slices.Sorted(maps.Keys(apps))
	if len(known) > 8 {
		known = append(known[:8], "…")
	}
	list := "none"
	if len(known) > 0 {
		list = strings.Join(known, ", ")
	}
	return nil, &unknownAppError{fmt.Sprintf("versions: no application %q on %s: none of its versions was ever registered (the applications there: %s)", app, c.topic, list)}
}

// ErrUnknownApp is what errors.Is finds in the error of an operation on an
// application the control topic has never had a version of (a typo, or
// another control topic). Such an error is an ErrNotRegistered too.
var ErrUnknownApp = errors.New("versions: unknown application")

type unknownAppError struct{ msg string }

func (e *unknownAppError) Error() string { return e.msg }
func (e *unknownAppError) Is(target error) bool {
	return target == ErrUnknownApp || target == ErrNotRegistered
}

// topicExists asks the broker whether the control topic exists, past the
// client's metadata cache, creating nothing.
func (c *Control) topicExists(ctx context.Context) (bool, error) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(c.topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return false, fmt.Errorf("versions: looking for %s: %w", c.topic, err)
	}
	for _, t := range resp.Topics {
		switch err := kerr.ErrorForCode(t.ErrorCode); {
		case errors.Is(err, kerr.UnknownTopicOrPartition):
			return false, nil
		case err != nil:
			return false, fmt.Errorf("versions: looking for %s: %w", c.topic, err)
		}
	}
	return len(resp.Topics) > 0, nil
}

// readAll reads a one-partition topic from its start to its current end.
func readAll(ctx context.Context, opts []kgo.Opt, adm *kadm.Client, topic string, fn func(*kgo.Record)) error {
	var end kadm.ListedOffset
	for attempt := 0; ; attempt++ {
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			return fmt.Errorf("versions: the end of %s: %w", topic, err)
		}
		var ok bool
		if end, ok = ends.Lookup(topic, 0); ok && end.Err == nil {
			break
		}
		if attempt == 50 {
			return fmt.Errorf("versions: the end of %s: %v", topic, end.Err)
		}
		select { // a topic just created, not yet in every broker's metadata
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if end.Offset == 0 {
		return nil
	}
	cl, err := kgo.NewClient(append(slices.Clone(opts), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		for _, fe := range fs.Errors() {
			return fmt.Errorf("versions: reading %s: %w", topic, fe.Err)
		}
		done := false
		fs.EachRecord(func(r *kgo.Record) {
			fn(r)
			done = done || r.Offset >= end.Offset-1
		})
		if done {
			return nil
		}
	}
}
