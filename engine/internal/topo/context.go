package topo

import (
	"fmt"
	"time"
)

// Context is a processor's view of its task: where to forward records, its
// stores, its clocks and the record being processed.
type Context struct {
	inst *nodeInst
}

// Name is the node's name.
func (c *Context) Name() string { return c.inst.node.Name }

// TaskID is the id of the task running the node.
func (c *Context) TaskID() TaskID { return c.inst.task.cfg.ID }

// Forward sends a record to every child, depth-first.
func (c *Context) Forward(r Record) error { return c.inst.forwardAll(r) }

// ForwardTo sends a record to the child with the given name.
func (c *Context) ForwardTo(child string, r Record) error {
	for _, ch := range c.inst.children {
		if ch.node.Name == child {
			return ch.process(r)
		}
	}
	return fmt.Errorf("engine: node %q has no child named %q", c.inst.node.Name, child)
}

// Store returns a store the node declared.
func (c *Context) Store(name string) (KVStore, error) {
	for _, s := range c.inst.node.Stores {
		if s == name {
			return c.inst.task.stores[name], nil
		}
	}
	for _, s := range c.inst.node.GlobalStores {
		if s == name {
			return c.inst.task.stores[name], nil
		}
	}
	return nil, fmt.Errorf("engine: node %q did not declare store %q; attach it to the node where the topology is built", c.inst.node.Name, name)
}

// Origin is where the record being processed came from; Offset is -1 in a
// punctuator.
func (c *Context) Origin() Origin { return c.inst.task.origin }

// StreamTime is the task's stream time (the zero time before any record).
func (c *Context) StreamTime() time.Time {
	if c.inst.task.streamTime == NoTime {
		return time.Time{}
	}
	return TimeOf(c.inst.task.streamTime)
}

// Now is the wall clock.
func (c *Context) Now() time.Time { return c.inst.task.cfg.Now() }

// Skip counts a record the node dropped, with the reason.
func (c *Context) Skip(reason string) { c.inst.task.Skip(c.inst.node.Name + ": " + reason) }

// Late reports that the input record being processed came too late for
// every window it belongs to, so that the runtime may dead-letter it. The
// node counts each skipped window with Skip as well.
func (c *Context) Late(reason string) error {
	if f := c.inst.task.cfg.OnLate; f != nil {
		return f(c.inst.node.Name + ": " + reason)
	}
	return nil
}

// Schedule calls fn every interval of the given clock until cancelled.
func (c *Context) Schedule(interval time.Duration, typ PunctuationType, fn func(time.Time) error) (cancel func(), err error) {
	ms := interval.Milliseconds()
	if ms <= 0 {
		return nil, fmt.Errorf("engine: node %q: punctuation interval %v is under a millisecond", c.inst.node.Name, interval)
	}
	t := c.inst.task
	p := &punctuator{inst: c.inst, typ: typ, interval: ms, fn: fn, next: NoTime}
	if typ == WallClockTime {
		p.next = t.cfg.Now().UnixMilli() + ms
	}
	t.puncts = append(t.puncts, p)
	return func() { p.cancelled = true }, nil
}

// Timestamp is the timestamp of the record the node is processing, or the
// time of the punctuation being run.
func (c *Context) Timestamp() time.Time { return TimeOf(c.inst.task.recordTime) }

// BeforeCommit registers fn to run in the task before each commit, once
// every record the task sent so far has been acknowledged by Kafka (so the
// callbacks given to WithProduced have run). What fn forwards and writes
// is part of the same commit.
func (c *Context) BeforeCommit(fn func() error) {
	c.inst.task.hooks = append(c.inst.task.hooks, commitHook{inst: c.inst, fn: fn})
}

// RequestCommit asks the runner to commit as soon as it has processed what
// it polled, rather than at the next commit interval.
func (c *Context) RequestCommit() { c.inst.task.commitSoon = true }
