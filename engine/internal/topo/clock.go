package topo

// Clock is a processor's own stream time: the largest timestamp of the
// records the processor was given. Kafka Streams' windowed aggregations,
// stream–stream joins, join grace buffers and suppression each keep one
// ("observed stream time") instead of reading the task's, so a record
// dropped or filtered out before it (a null key, a filter, a tombstone an
// aggregation skips) closes no window and releases nothing; Oxbow's do the
// same. A task that resumed a committed stream time after a restart starts
// its processors' clocks there, so a window that had closed stays closed (a
// processor's own time is never ahead of its task's, so this can only
// close windows earlier than an uninterrupted run would, never reopen one).
type Clock struct {
	ms      int64
	started bool
}

// Observe moves the clock up to ts (Unix ms) and returns its time.
func (cl *Clock) Observe(c *Context, ts int64) int64 {
	cl.start(c)
	if ts > cl.ms {
		cl.ms = ts
	}
	return cl.ms
}

func (cl *Clock) start(c *Context) {
	if !cl.started {
		cl.ms, cl.started = c.inst.task.resumedTime, true
	}
}
