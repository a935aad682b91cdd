// Package assign is the group assignment of Oxbow's runtime: a franz-go
// group balancer ([Balancer], protocol [Protocol]) that assigns tasks, not
// partitions, to the instances of one application version.
//
// A task is a sub-topology and a partition number, and owns that partition of
// every (co-partitioned) source topic of its sub-topology, so a member always
// consumes whole tasks. [Tasks] derives the tasks from the sub-topologies
// ([Group]) and the partition counts the leader's client loads; co-partitioned
// topics with different counts fail the rebalance with a [*CoPartitionError].
//
// Each member joins with a [MemberInfo] in its consumer-protocol UserData: its
// process id, advertised HTTP address and client tags, the tasks it ran active
// and standby last generation, and an offset sum for each task whose state it
// holds locally. The leader runs [Assign] — sticky, then most-caught-up state,
// then even counts, then standby replicas — and sends every member the
// complete placement of every task, so that any instance can find the
// instance that owns a key ([Assignment.KeyOwner], [Partition]).
//
// Standby placement is rack aware, as with Kafka Streams'
// rack.aware.assignment.tags and client.tag.* (KIP-708). An instance's tags
// say where it runs, such as {"rack": "r1"} or {"zone": "eu-1a", "cluster":
// "k1"}; each standby replica goes to a member whose tags differ from those
// of the task's active member and of its other replicas in as many keys as
// possible, and only among equally distinct members do state and balance
// decide. A task thus keeps a copy through the loss of a rack whenever
// another rack has a member, at the price of uneven standby counts when the
// racks differ in size. Every member learns every member's tags with the
// assignment, so any instance can say why a standby sits where it does
// ([Assignment.Explain]). Without tags, the plan is the same as before tags
// existed.
//
// [Assign] is a pure function, so the algorithm is tested without Kafka:
//
//	members := []assign.Member{{ID: "m1", Info: assign.MemberInfo{InstanceID: "a"}}, …}
//	plan, err := assign.Assign(members, tasks, 1)
//
// Under [WarmProtocol], a task moves only once its new owner has caught up
// ([AssignWarm], as Kafka Streams' warm-up replicas): until then it stays
// with its previous owner (or, if that owner has left, goes to a member
// whose state is caught up, its standby, beyond balance) and the new one
// keeps a warm-up replica of it, sent as a standby; the member asks for the
// rebalance that moves it when that standby has caught up
// ([Assignment].Warmups).
//
// The encodings are in encode.go; cooperative rebalancing, and why the
// classic protocol, are explained on [Balancer].
package assign
