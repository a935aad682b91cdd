package versions

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/oxbow-dev/oxbow/engine"
)

// Instances are the running instances of a registered version (the live
// members of its consumer group) with their advertised HTTP addresses, in
// instance order: where a process that does not run the version sends
// the requests for it (httpapi's version dispatcher does). A member that
// is not an engine's (a console consumer in the group, say) is left out.
func (c *Control) Instances(ctx context.Context, app, version string) ([]engine.Instance, error) {
	a, err := c.App(ctx, app)
	if err != nil {
		return nil, err
	}
	v, ok := a.Versions[version]
	if !ok {
		return nil, notRegistered(a, version)
	}
	described, err := c.adm.DescribeGroups(ctx, v.Group)
	if err != nil && !isGroupGone(err) {
		return nil, fmt.Errorf("versions: describing %s: %w", v.Group, err)
	}
	d, ok := described[v.Group]
	if !ok || d.Err != nil {
		return nil, nil
	}
	var out []engine.Instance
	for _, m := range d.Members {
		meta, ok := m.Join.AsConsumer()
		if !ok {
			continue
		}
		in, err := engine.MemberInstance(meta.UserData)
		if err != nil {
			continue
		}
		out = append(out, in)
	}
	slices.SortFunc(out, func(a, b engine.Instance) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}
