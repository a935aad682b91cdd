package engine

import (
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
)

// ACL is one permission an application's principal needs on a cluster whose
// brokers authorize (ACLs on: Kafka's StandardAuthorizer with
// allow.everyone.if.no.acl.found=false).
type ACL struct {
	// Resource is "topic", "group", "transactional-id" or "cluster";
	// Name its name, or the prefix of the names when Prefixed.
	Resource, Name string
	Prefixed       bool
	// Operations are Kafka's operation names: READ, WRITE, CREATE, ...
	Operations []string
	// Why says what the application does with it.
	Why string
}

// ACLs are the permissions an instance of the topology with cfg needs, as
// Kafka Streams' documentation lists them for its applications, with the
// same prefixes: its consumer group; its internal topics, all named
// "<group>-" (created, read, written, their committed records of
// repartition topics deleted); its transactional ids under exactly-once,
// also "<group>-"; READ on the topics it reads, WRITE on those it writes;
// CREATE and WRITE on the dead-letter topic. Under exactly-once also READ
// on the topics it writes (finding, before it writes, a transaction of its
// own producer Kafka left open there), and what
// finding and ending the transactions Kafka left open needs
// (Config.LeaveHangingTransactions): DESCRIBE on every transactional id,
// READ on __transaction_state and __consumer_offsets, and, unless
// LeaveHangingTransactions, CLUSTER_ACTION. The group is AppID, or AppID-Version: grant
// each version its own, or the group and topic prefix "AppID-" to every
// version at once. Aggregate clients, change feeds and the versions
// package need what they read and write besides (the README's "Running
// it securely").
func ACLs(t *Topology, cfg Config) []ACL {
	cfg.Guarantee = t.guarantee(cfg.Guarantee)
	group := NamesOf(cfg).Group()
	var reads, writes []string
	for _, sub := range t.t.Subs {
		for _, n := range sub.Nodes {
			if n.Internal {
				continue
			}
			switch n.Kind {
			case topo.SourceNode:
				reads = append(reads, n.Topic)
			case topo.SinkNode:
				writes = append(writes, n.Topic)
			}
		}
	}
	acls := []ACL{
		{Resource: "group", Name: group, Operations: []string{"READ", "DESCRIBE"}, Why: "the consumer group: join, commit, read its offsets"},
		{Resource: "topic", Name: group + "-", Prefixed: true,
			Operations: []string{"CREATE", "READ", "WRITE", "DELETE", "DESCRIBE", "DESCRIBE_CONFIGS"},
			Why:        "the internal topics (changelogs, repartition topics): create, restore, write, purge"},
	}
	if cfg.DeadLetterTopic != "" {
		// The instance creates it when missing (Config.DeadLetterTopic),
		// wherever it is named.
		ops := []string{"CREATE", "WRITE", "DESCRIBE"}
		if cfg.Guarantee == ExactlyOnce {
			ops = append(ops, "READ") // as an output's
		}
		acls = append(acls, ACL{Resource: "topic", Name: cfg.DeadLetterTopic, Operations: ops,
			Why: "the dead-letter topic: created if missing, written"})
	}
	if cfg.Guarantee == ExactlyOnce {
		acls = append(acls, ACL{Resource: "transactional-id", Name: group + "-", Prefixed: true,
			Operations: []string{"WRITE", "DESCRIBE"}, Why: "exactly-once: each instance's transactional id"})
		// Finding, while it makes no progress, the transactions Kafka left
		// open on its partitions (package hanging), and ending them.
		acls = append(acls,
			ACL{Resource: "transactional-id", Name: "*", Operations: []string{"DESCRIBE"},
				Why: "finding which producer left a transaction open on an input (DescribeTransactions)"},
			ACL{Resource: "topic", Name: "__transaction_state", Operations: []string{"READ", "DESCRIBE"},
				Why: "reading what the coordinator decided for a transaction left open"},
			ACL{Resource: "topic", Name: "__consumer_offsets", Operations: []string{"READ", "DESCRIBE"},
				Why: "finding a transaction left open on the group's offsets (DescribeProducers needs READ, which lets the principal read every group's offsets; without it such a transaction shows only as a stall)"})
		if !cfg.LeaveHangingTransactions {
			acls = append(acls, ACL{Resource: "cluster", Name: "kafka-cluster", Operations: []string{"CLUSTER_ACTION"},
				Why: "ending a transaction Kafka left open with the marker its coordinator decided (WriteTxnMarkers); LeaveHangingTransactions does without"})
		}
	}
	outOps, outWhy := []string{"WRITE", "DESCRIBE"}, "an output"
	if cfg.Guarantee == ExactlyOnce {
		// Before it writes, an instance looks for transactions of its own
		// producer Kafka left open where it writes (DescribeProducers).
		outOps, outWhy = []string{"WRITE", "DESCRIBE", "READ"}, "an output (READ: finding, before writing, a transaction of the instance's own producer Kafka left open there)"
	}
	for _, ts := range []struct {
		topics []string
		ops    []string
		why    string
	}{{reads, []string{"READ", "DESCRIBE"}, "an input"}, {writes, outOps, outWhy}} {
		slices.Sort(ts.topics)
		for _, tp := range slices.Compact(ts.topics) {
			acls = append(acls, ACL{Resource: "topic", Name: tp, Operations: ts.ops, Why: ts.why})
		}
	}
	return acls
}

// Builders are the ACLs as kadm builders allowing principal ("User:name")
// from any host, for kadm.Client.CreateACLs.
func Builders(acls []ACL, principal string) ([]*kadm.ACLBuilder, error) {
	var out []*kadm.ACLBuilder
	for _, a := range acls {
		b := kadm.NewACLs().Allow(principal).AllowHosts()
		switch a.Resource {
		case "topic":
			b = b.Topics(a.Name)
		case "group":
			b = b.Groups(a.Name)
		case "transactional-id":
			b = b.TransactionalIDs(a.Name)
		case "cluster":
			b = b.Clusters()
		default:
			return nil, fmt.Errorf("engine: ACL resource %q", a.Resource)
		}
		pattern := kadm.ACLPatternLiteral
		if a.Prefixed {
			pattern = kadm.ACLPatternPrefixed
		}
		var ops []kadm.ACLOperation
		for _, o := range a.Operations {
			op, err := kmsg.ParseACLOperation(o)
			if err != nil {
				return nil, fmt.Errorf("engine: ACL operation %q: %w", o, err)
			}
			ops = append(ops, op)
		}
		out = append(out, b.ResourcePatternType(pattern).Operations(ops...))
	}
	return out, nil
}

// Command is the acl as a kafka-acls.sh command line for principal.
func (a ACL) Command(bootstrap, principal string) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "kafka-acls.sh --bootstrap-server %s --command-config admin.properties --add --allow-principal %s", bootstrap, principal)
	for _, o := range a.Operations {
		sb.WriteString(" --operation " + o)
	}
	if a.Resource == "cluster" {
		sb.WriteString(" --cluster")
	} else {
		name := a.Name
		if strings.ContainsFunc(name, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-", r))
		}) {
			name = "'" + strings.ReplaceAll(name, "'", `'\''`) + "'" // for the shell: "*" is every one
		}
		fmt.Fprintf(&sb, " --%s %s", a.Resource, name)
	}
	if a.Prefixed {
		sb.WriteString(" --resource-pattern-type prefixed")
	}
	return sb.String()
}
