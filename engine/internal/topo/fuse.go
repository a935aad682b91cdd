package topo

// Fusion. Values travel between processors boxed in a Record, which costs an
// allocation for each key and value a node produces, and a call through the
// Processor interface for each node. Most stateless topologies are a line:
// a source, some filters and maps, one sink. For such a line the DSL, which
// knows every node's Go types, compiles one typed function (Node.Fuse) that
// decodes the record's key and value into their types and passes them from
// step to step as plain arguments up to the sink's encoder, as Flink chains
// operators. The task runs that function in place of the generic path for
// the line's source; it keeps doing the task's own part (origin, decode
// error policy, event and stream time, punctuation), so the two paths differ
// only in cost. Topology.Unfused turns fusion off, for tests that run the
// same cases both ways.

// FuseEnv is what a fused line needs from the task that runs it.
type FuseEnv interface {
	// Send writes an output record.
	Send(out Output) error
	// Skip counts a record a node of the line dropped.
	Skip(node *Node, reason string)
	// TopicName resolves a sink's topic.
	TopicName(ref TopicRef) string
	// Seen is the count of records that reached the node in this task
	// (Task.NodeRecords), for the line's step of the node to add to.
	Seen(node *Node) *int64
}

// Fused is a source's fused line in one task: single-threaded, like the
// task.
type Fused interface {
	// Decode decodes a record's key and value, keeping them for Run. Its
	// errors are *serde.Error, as the generic path's.
	Decode(in Input) error
	// Boxed returns what Decode kept as a Record would hold it (nil for a
	// null key and a tombstone), for the source's timestamp function.
	Boxed() (key, value any)
	// Run passes the decoded record down the line, with ts (Unix ms) as
	// its timestamp, and then forgets it.
	Run(in Input, ts int64) error
}

type fuseEnv struct {
	t      *Task
	byNode map[*Node]*nodeInst
}

func (e fuseEnv) Send(out Output) error { return e.t.cfg.Collector.Send(out) }

func (e fuseEnv) Skip(n *Node, reason string) { e.t.Skip(n.Name + ": " + reason) }

func (e fuseEnv) TopicName(ref TopicRef) string { return e.t.cfg.TopicName(ref) }

func (e fuseEnv) Seen(n *Node) *int64 { return &e.byNode[n].seen }

// processFused is process for a source with a fused line.
func (t *Task) processFused(src *nodeInst, in Input) error {
	f := src.fused
	err := f.Decode(in)
	var ts int64
	if err == nil {
		ts, err = src.eventTime(in, in.Value != nil, f.Boxed)
	}
	if err != nil {
		return t.decodeFailed(in, err)
	}
	t.advance(ts)
	if err := f.Run(in, ts); err != nil {
		return err
	}
	return t.punctuate(StreamTime, t.streamTime)
}
