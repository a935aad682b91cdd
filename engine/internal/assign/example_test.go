package assign_test

import (
	"fmt"

	"github.com/oxbow-dev/oxbow/engine/internal/assign"
	"github.com/oxbow-dev/oxbow/engine/internal/topo"
)

func ExampleAssign() {
	// One sub-topology reads two co-partitioned topics of 4 partitions.
	groups := []assign.Group{{Sub: 0, Topics: []string{"orders", "payments"}}}
	tasks, err := assign.Tasks(groups, map[string]int32{"orders": 4, "payments": 4})
	if err != nil {
		panic(err)
	}
	// Instance a ran every task; b just started and has a copy of 0_3's state.
	members := []assign.Member{
		{ID: "member-1", Info: assign.MemberInfo{InstanceID: "a", Active: tasks}},
		{ID: "member-2", Info: assign.MemberInfo{InstanceID: "b", OffsetSums: map[topo.TaskID]int64{{Sub: 0, Partition: 3}: 1200}}},
	}
	plan, err := assign.Assign(members, tasks, 1)
	if err != nil {
		panic(err)
	}
	for _, m := range members {
		active, standby := plan.Of(m.ID)
		fmt.Println(m.Info.InstanceID, "active", active, "standby", standby)
	}
	// Output:
	// a active [0_0 0_1] standby [0_2 0_3]
	// b active [0_2 0_3] standby [0_0 0_1]
}
