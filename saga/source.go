package saga

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/oxbow-dev/oxbow/aggregate"
	"github.com/oxbow-dev/oxbow/engine"
)

// Source is an aggregate's events that a process manager reacts to: see
// [On].
type Source interface{ source() *source }

// Meta is where an event is from: given to a source's correlate function
// with the event.
type Meta struct {
	// AggregateID is the id of the aggregate that made the event (the
	// record's key); Version the version the event made it (0 if the
	// record does not say).
	AggregateID string
	Version     int64
	// Time is the event's timestamp.
	Time time.Time
}

type source struct {
	name, topic string
	stream      *engine.Stream[string, []byte]
	known       func(typeName string) bool
	decode      func([]byte) (any, error)
	correlate   func(ev any, m Meta) (string, bool)
	err         error
}

func (s *source) source() *source { return s }

// On makes the events of the contract's aggregate a source: each is given
// to correlate, which names the instance it concerns (false, or an empty
// id: none, and the event is passed over). An event of a type the contract
// does not register (a newer producer's) is passed over too. One that does
// not decode is a processing error, as is one of a registered type at a
// schema version newer than the contract's: upgrade the reader of a
// contract before its writer.
func On[C, E any](c aggregate.Contract[C, E], correlate func(ev E, m Meta) (instance string, ok bool)) Source {
	c, err := c.Check()
	s := &source{name: c.Name, topic: c.EventTopic, err: err}
	if err == nil && correlate == nil {
		s.err = fmt.Errorf("source %q: the correlate function is nil", c.Name)
	}
	if s.err != nil {
		return s
	}
	s.known = c.Events.Knows
	s.decode = func(b []byte) (any, error) { return c.Events.Decode(b) }
	s.correlate = func(ev any, m Meta) (string, bool) { return correlate(ev.(E), m) }
	return s
}

// OnStream is On for a topology that already reads the contract's event
// topic (a topic is read by one source): the process manager takes the
// records of that stream, which must be the topic's records as read,
// undecoded.
func OnStream[C, E any](c aggregate.Contract[C, E], events *engine.Stream[string, []byte], correlate func(ev E, m Meta) (instance string, ok bool)) Source {
	s := On(c, correlate).source()
	if s.err == nil && events == nil {
		s.err = fmt.Errorf("source %q: the stream is nil", s.name)
	}
	s.stream = events
	return s
}

func origin(md engine.Metadata) string {
	return md.Topic + "/" + strconv.Itoa(int(md.Partition)) + "/" + strconv.FormatInt(md.Offset, 10)
}

// correlator keys a source's events by the instance they concern.
type correlator struct {
	saga    string
	startAt time.Time
	m       *source
}

func (c *correlator) Process(ctx *engine.ProcessorContext[string, []byte], rec engine.Record[string, []byte]) error {
	if rec.Value == nil || (!c.startAt.IsZero() && rec.Timestamp.Before(c.startAt)) {
		return nil
	}
	name, ok := aggregate.HeaderValue(rec.Headers, aggregate.HeaderType)
	if !ok {
		var env struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(rec.Value, &env)
		name = env.Type
	}
	if name != "" && !c.m.known(name) {
		ctx.Skip("an event of a type the contract does not register: " + name)
		return nil
	}
	ev, err := c.m.decode(rec.Value)
	if err != nil {
		return fmt.Errorf("saga %s: the event of %s at %s: %w", c.saga, c.m.name, origin(ctx.Metadata()), err)
	}
	meta := Meta{AggregateID: rec.Key, Time: rec.Timestamp}
	if v, ok := aggregate.HeaderValue(rec.Headers, aggregate.HeaderAggregateVersion); ok {
		meta.Version, _ = strconv.ParseInt(v, 10, 64)
	}
	inst, ok := c.m.correlate(ev, meta)
	if !ok || inst == "" {
		return nil
	}
	rec.Headers = append(rec.Headers[:len(rec.Headers):len(rec.Headers)],
		engine.Header{Key: headerInput, Value: []byte("event:" + c.m.name)},
		engine.Header{Key: headerOrigin, Value: []byte(origin(ctx.Metadata()))},
		engine.Header{Key: headerKey, Value: []byte(rec.Key)})
	rec.Key = inst
	return ctx.Forward(rec)
}

// outcomeRouter keys the outcomes of the process manager's commands to a
// target by the instance that sent them, and passes over the others.
type outcomeRouter struct {
	saga string
	t    *target
}

func (r *outcomeRouter) Process(ctx *engine.ProcessorContext[string, []byte], rec engine.Record[string, []byte]) error {
	inst, ok := instanceOf(r.saga, rec.Key)
	if !ok || rec.Value == nil {
		return nil
	}
	rec.Key = inst
	rec.Headers = append(rec.Headers[:len(rec.Headers):len(rec.Headers)],
		engine.Header{Key: headerInput, Value: []byte("outcome:" + r.t.name)},
		engine.Header{Key: headerOrigin, Value: []byte(origin(ctx.Metadata()))})
	return ctx.Forward(rec)
}
