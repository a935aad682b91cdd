package assign

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
)

// hasTags says whether tags has a tag with a value; an empty value is no tag.
func hasTags(tags map[string]string) bool {
	for _, v := range tags {
		if v != "" {
			return true
		}
	}
	return false
}

// distinctness counts the keys, of tags and others together, for which tags
// has a value that no map of others has; a missing tag has the value "".
func distinctness(tags map[string]string, others []map[string]string) int {
	differs := func(k string) bool {
		for _, o := range others {
			if o[k] == tags[k] {
				return false
			}
		}
		return true
	}
	n := 0
	for k := range tags {
		if differs(k) {
			n++
		}
	}
	for i, o := range others {
		for k := range o {
			if _, seen := tags[k]; seen || slices.ContainsFunc(others[:i], func(p map[string]string) bool { _, ok := p[k]; return ok }) {
				continue
			}
			if differs(k) {
				n++
			}
		}
	}
	return n
}

// differing lists, sorted, the keys of x and y for which their values differ.
func differing(x, y map[string]string) []string {
	var keys []string
	for k := range x {
		if x[k] != y[k] {
			keys = append(keys, k)
		}
	}
	for k := range y {
		if _, ok := x[k]; !ok && y[k] != "" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// formatTags shows tags as "k1=v1,k2=v2", sorted by key, without empty values;
// "no tags" if none is left.
func formatTags(tags map[string]string) string {
	var kv []string
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		if tags[k] != "" {
			kv = append(kv, k+"="+tags[k])
		}
	}
	if len(kv) == 0 {
		return "no tags"
	}
	return strings.Join(kv, ",")
}

// name is how an explanation names an instance: its process id, else its
// member id.
func (in Instance) name() string {
	if in.InstanceID != "" {
		return in.InstanceID
	}
	return in.MemberID
}

// Explain says, for every task with standbys, why they sit where they do, for
// a status page: one sentence per standby, in the order of
// [Placement.Standbys], joined by "; ". A standby that differs from the
// active in some tags says in which:
//
//	standby on p2 (rack=r2): differs from the active p1 (rack=r1) in rack
//
// One with the same tags as the active says why no instance with other tags
// holds it instead: there is none, every one holds another standby of the
// task, none of the free ones is more distinct (see [Assign]), or else
// balance kept it:
//
//	standby on p3 (rack=r1): same tags as the active p1 — every instance with other tags holds another standby
//
// When no instance has tags, standbys go by state and balance alone:
//
//	standby on p2: no instance has tags, placed by state and balance
//
// The sentences depend only on a, so every instance explains a generation
// alike.
func (a Assignment) Explain() map[topo.TaskID]string {
	tagged := false
	for _, m := range a.Members {
		tagged = tagged || hasTags(m.Tags)
	}
	out := map[topo.TaskID]string{}
	for t, pl := range a.Tasks {
		var why []string
		for i, s := range pl.Standbys {
			if !tagged {
				why = append(why, fmt.Sprintf("standby on %s: no instance has tags, placed by state and balance", s.name()))
				continue
			}
			prefix := fmt.Sprintf("standby on %s (%s): ", s.name(), formatTags(s.Tags))
			if keys := differing(s.Tags, pl.Active.Tags); len(keys) > 0 {
				why = append(why, fmt.Sprintf("%sdiffers from the active %s (%s) in %s",
					prefix, pl.Active.name(), formatTags(pl.Active.Tags), strings.Join(keys, ", ")))
				continue
			}
			why = append(why, fmt.Sprintf("%ssame tags as the active %s — %s", prefix, pl.Active.name(), a.sameTags(pl, i)))
		}
		if len(why) > 0 {
			out[t] = strings.Join(why, "; ")
		}
	}
	return out
}

// sameTags says why standby i of pl, which has the active's tags, holds the
// task rather than an instance with other tags.
func (a Assignment) sameTags(pl Placement, i int) string {
	others := []map[string]string{pl.Active.Tags}
	for j, s := range pl.Standbys {
		if j != i {
			others = append(others, s.Tags)
		}
	}
	other, free, best := false, false, 0
	for _, m := range a.Members {
		if m.MemberID == pl.Active.MemberID || len(differing(m.Tags, pl.Active.Tags)) == 0 {
			continue
		}
		other = true
		if slices.ContainsFunc(pl.Standbys, func(s Instance) bool { return s.MemberID == m.MemberID }) {
			continue
		}
		free = true
		best = max(best, distinctness(m.Tags, others))
	}
	switch {
	case !other:
		return "no instance has other tags"
	case !free:
		return "every instance with other tags holds another standby"
	case best == 0:
		return "no free instance is more distinct"
	default:
		return "kept for balance"
	}
}
