package aggregate

import (
	"cmp"
	"errors"
	"fmt"

	"github.com/oxbow-dev/oxbow/engine/serde"
)

// Contract is what another service needs to work with an aggregate without
// its code or its process: the topics of its commands, events and outcomes,
// and the registered types of its commands and events. The aggregate's
// owner publishes it in a package of types (the command and event structs
// and a function that registers them), and another service builds the same
// Contract from it to submit commands ([Contract.NewClient]), to send them
// from a process manager (package saga) or to read the events (a
// projection's stream with [Contract.EventSerde]).
//
// The contract is versioned by its types' schema versions, commands as
// events: a type changed incompatibly is registered at the next version
// ([RegisterVersion]) with an upcaster from the one before ([Types.Upcast]),
// so that the aggregate still decides the commands that a service built on
// the older types sends, and readers of the older events still read them.
// Rename nothing and remove nothing that a reader may still get.
type Contract[C, E any] struct {
	// Name is the aggregate's name.
	Name string
	// CommandTopic, EventTopic and ReplyTopic default to "<name>-commands",
	// "<name>-events" and "<name>-outcomes", as the aggregate's do.
	CommandTopic, EventTopic, ReplyTopic string
	Commands                             *Types[C]
	Events                               *Types[E]
}

// Contract is the aggregate's contract: its topics and types.
func (a *Aggregate[S, C, E]) Contract() Contract[C, E] {
	return Contract[C, E]{Name: a.cfg.Name, CommandTopic: a.cfg.CommandTopic, EventTopic: a.cfg.EventTopic, ReplyTopic: a.cfg.ReplyTopic,
		Commands: a.cfg.Commands, Events: a.cfg.Events}
}

// Check checks the contract and fills in the default topics.
func (c Contract[C, E]) Check() (Contract[C, E], error) {
	var errs []error
	if c.Name == "" {
		errs = append(errs, errors.New("the Name is empty"))
	}
	if c.Commands == nil || c.Events == nil {
		errs = append(errs, errors.New("the registries Commands and Events must be set"))
	} else {
		errs = append(errs, c.Commands.check("Commands"), c.Events.check("Events"))
	}
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("aggregate contract %q: %w", c.Name, err)
	}
	c.CommandTopic, c.EventTopic, c.ReplyTopic = defaultTopics(c.Name, c.CommandTopic, c.EventTopic, c.ReplyTopic)
	return c, nil
}

// defaultTopics fills in the topics of the aggregate called name that are
// not given.
func defaultTopics(name, commands, events, replies string) (string, string, string) {
	return cmp.Or(commands, name+"-commands"), cmp.Or(events, name+"-events"), cmp.Or(replies, name+"-outcomes")
}

// EventSerde reads and writes the aggregate's events (self-describing
// JSON, upcast on read, or the serde given to [Types.Use]).
func (c Contract[C, E]) EventSerde() serde.Serde[E] {
	return serde.Func(c.Events.Encode, c.Events.Decode)
}

// CommandSerde reads and writes the aggregate's commands.
func (c Contract[C, E]) CommandSerde() serde.Serde[C] {
	return serde.Func(c.Commands.Encode, c.Commands.Decode)
}
