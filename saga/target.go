package saga

import (
	"fmt"
	"time"

	"github.com/oxbow-dev/oxbow/aggregate"
)

// Destination is an aggregate a process manager sends commands to: a
// [Target] of any command type.
type Destination interface{ target() *target }

// Target is an aggregate a process manager sends commands of type C to,
// made from its contract with [To]. List it in Config.Targets.
type Target[C any] struct{ t *target }

type target struct {
	name, commandTopic, replyTopic string
	typeName                       func(any) (string, error)
	encode                         func(any) ([]byte, error)
	decode                         func([]byte) (any, error)
	err                            error
}

func (t *Target[C]) target() *target { return t.t }

// To makes the contract's aggregate a target.
func To[C, E any](c aggregate.Contract[C, E]) *Target[C] {
	c, err := c.Check()
	t := &target{name: c.Name, commandTopic: c.CommandTopic, replyTopic: c.ReplyTopic, err: err}
	if err == nil {
		t.typeName = func(v any) (string, error) { return c.Commands.NameOf(v.(C)) }
		t.encode = func(v any) ([]byte, error) { return c.Commands.Encode(v.(C)) }
		t.decode = func(b []byte) (any, error) { return c.Commands.Decode(b) }
	}
	return &Target[C]{t: t}
}

// Name is the target aggregate's name.
func (t *Target[C]) Name() string { return t.t.name }

// Send sends cmd to the target's aggregate aggregateID. Its id is made
// from the process manager's name, the instance and the number of commands
// the instance sent before; it carries the instance's correlation id, and
// as causation id the id of the input reacted to. Its [Outcome] comes back
// to the instance.
func (t *Target[C]) Send(aggregateID string, cmd C, opts ...SendOption) Action {
	a := Action{kind: actSend, target: t.t, aggregateID: aggregateID, command: cmd}
	for _, o := range opts {
		o(&a)
	}
	return a
}

func (t *target) String() string { return fmt.Sprintf("target %q", t.name) }

// TargetInfo describes a target of a process manager (for tools and
// tests): its name, topics, and how its commands are read.
type TargetInfo struct {
	Name, CommandTopic, ReplyTopic string
	// DecodeCommand reads a command of the target from its envelope.
	DecodeCommand func([]byte) (any, error)
}

// Targets describes the process manager's targets, in Config's order.
func (m *Manager[S]) Targets() []TargetInfo {
	out := make([]TargetInfo, len(m.targets))
	for i, t := range m.targets {
		out[i] = TargetInfo{Name: t.name, CommandTopic: t.commandTopic, ReplyTopic: t.replyTopic, DecodeCommand: t.decode}
	}
	return out
}

// SourceInfo describes a source of a process manager: the aggregate's
// name and its event topic.
type SourceInfo struct{ Name, Topic string }

// Sources describes the process manager's sources, in Config's order.
func (m *Manager[S]) Sources() []SourceInfo {
	out := make([]SourceInfo, len(m.sources))
	for i, s := range m.sources {
		out[i] = SourceInfo{Name: s.name, Topic: s.topic}
	}
	return out
}

// Command is what a Send action sends: the target's name, the aggregate's
// id and the command (ok is false for other actions).
func (a Action) Command() (target, aggregateID string, cmd any, ok bool) {
	if a.kind != actSend || a.target == nil {
		return "", "", nil, false
	}
	return a.target.name, a.aggregateID, a.command, true
}

// String describes the action.
func (a Action) String() string {
	switch a.kind {
	case actSend:
		name := "?"
		if a.target != nil {
			name = a.target.name
		}
		s := fmt.Sprintf("send %T%+v to %s %q", a.command, a.command, name, a.aggregateID)
		if a.expected != nil {
			s += fmt.Sprintf(" expecting version %d", *a.expected)
		}
		return s
	case actSetTimeout:
		return fmt.Sprintf("set timeout %q at %s", a.name, a.at.UTC().Format(time.RFC3339Nano))
	case actCancelTimeout:
		return fmt.Sprintf("cancel timeout %q", a.name)
	case actEnd:
		return "end"
	}
	return "no action"
}
