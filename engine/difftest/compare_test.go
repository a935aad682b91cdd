package difftest

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// referenceBugs are Kafka Streams' known failures on inputs it should
// handle: where one stops a case, Oxbow is compared up to that step only
// (and must not fail there), and the test counts the case apart.
var referenceBugs = []struct {
	op, message string // the op's name begins with op; the failure's message holds message
	why         string
}{
	{"table-join/left/grace", "NullPointerException key cannot be null",
		"a stream–table left join with a grace period throws on a record with a null key (KIP-962 lets left joins take them; without grace it does)"},
}

// referenceBug says which of referenceBugs stopped a case, if one did.
func referenceBug(c *testCase, ks result) string {
	if !ks.failed || ks.failAt < 0 {
		return ""
	}
	for _, b := range referenceBugs {
		if strings.HasPrefix(c.op.name, b.op) && strings.Contains(ks.failMsg, b.message) {
			return b.why
		}
	}
	return ""
}

// differs reports whether two results differ, in what a user could see:
// the records each step wrote (key and value bytes, timestamp, the order of
// each topic's records), and whether and where the case failed. Failure
// messages are not compared; a topology both refuse to build is the same.
// Where a known bug of Kafka Streams stopped the case, the steps before it
// are compared, and Oxbow must have gone past it.
func differs(c *testCase, ks, ox result) bool {
	if referenceBug(c, ks) != "" {
		at := ks.failAt
		if ox.failed && ox.failAt <= at || len(ox.steps) <= at {
			return true
		}
		ks.failed, ks.steps, ox.steps = false, ks.steps[:at], ox.steps[:at]
	}
	if ks.failed != ox.failed || ks.failed && ks.failAt != ox.failAt {
		return true
	}
	if len(ks.steps) != len(ox.steps) {
		return true
	}
	for i := range ks.steps {
		if !slices.EqualFunc(ks.steps[i], ox.steps[i], sameRecord) {
			return true
		}
	}
	return false
}

func sameRecord(a, b record) bool {
	return a.topic == b.topic && a.ts == b.ts && hexOrNull(a.key) == hexOrNull(b.key) && hexOrNull(a.value) == hexOrNull(b.value)
}

// report shows a case and both results step by step, for people: each step's
// input, then what Kafka Streams and Oxbow wrote, the first difference marked.
func report(c *testCase, ks, ox result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s  %s\n", c.op.name, c.paramString())
	marked := false
	for i, s := range c.steps {
		fmt.Fprintf(&b, "  %2d  %s\n", i, c.stepString(s))
		var kr, or []record
		if i < len(ks.steps) {
			kr = ks.steps[i]
		}
		if i < len(ox.steps) {
			or = ox.steps[i]
		}
		failsHere := func(r result) bool { return r.failed && r.failAt == i }
		same := slices.EqualFunc(kr, or, sameRecord) && failsHere(ks) == failsHere(ox)
		for _, side := range []struct {
			name string
			recs []record
			res  result
		}{{"kafka-streams", kr, ks}, {"oxbow", or, ox}} {
			if same && len(kr) == 0 && !failsHere(side.res) {
				continue
			}
			mark := "    "
			if !same && !marked {
				mark = " >> "
			}
			var outs []string
			for _, r := range side.recs {
				outs = append(outs, c.recordString(r))
			}
			if failsHere(side.res) {
				outs = append(outs, "FAILED: "+side.res.failMsg)
			}
			if same {
				fmt.Fprintf(&b, "      both           %s\n", strings.Join(outs, "  "))
				break
			}
			if len(outs) == 0 {
				outs = []string{"(nothing)"}
			}
			fmt.Fprintf(&b, "  %s%-13s  %s\n", mark, side.name, strings.Join(outs, "  "))
		}
		if !same {
			marked = true
		}
	}
	for _, side := range []struct {
		name string
		res  result
	}{{"kafka-streams", ks}, {"oxbow", ox}} {
		if side.res.failed && side.res.failAt < 0 {
			fmt.Fprintf(&b, "  %s failed to build: %s\n", side.name, side.res.failMsg)
		}
	}
	return b.String()
}

func (c *testCase) paramString() string {
	var ps []string
	for _, k := range slices.Sorted(maps.Keys(c.params)) {
		ps = append(ps, k+"="+c.params[k])
	}
	return strings.Join(ps, " ")
}

func (c *testCase) stepString(s step) string {
	if s.wall > 0 {
		return fmt.Sprintf("wall clock +%dms", s.wall)
	}
	return fmt.Sprintf("%-6s %s %s @%d", s.topic, textOrNull(s.key), textOrNull(s.value), s.ts)
}

func (c *testCase) recordString(r record) string {
	key, value := text, text
	for _, o := range c.op.outputs {
		if o.topic == r.topic {
			key, value = o.key, o.value
		}
	}
	topic := ""
	if len(c.op.outputs) > 1 {
		topic = r.topic + ":"
	}
	return fmt.Sprintf("%s%s=%s@%d", topic, formatted(r.key, key), formatted(r.value, value), r.ts)
}

func textOrNull(b []byte) string {
	switch {
	case b == nil:
		return "~"
	case len(b) == 0:
		return `""`
	}
	return string(b)
}

// formatted reads bytes in a format, or shows them in hex if they are not in it.
func formatted(b []byte, f format) string {
	if b == nil {
		return "~"
	}
	switch f {
	case int64be:
		if len(b) == 8 {
			return strconv.FormatInt(int64(binary.BigEndian.Uint64(b)), 10)
		}
	case windowed:
		if n := len(b) - 8; n >= 0 {
			return fmt.Sprintf("%s[%d]", b[:n], int64(binary.BigEndian.Uint64(b[n:])))
		}
	case session:
		if n := len(b) - 16; n >= 0 {
			return fmt.Sprintf("%s[%d,%d]", b[:n], int64(binary.BigEndian.Uint64(b[n+8:])), int64(binary.BigEndian.Uint64(b[n:n+8])))
		}
	default:
		return textOrNull(b)
	}
	return fmt.Sprintf("0x%x", b)
}

// shrink removes steps from a case for as long as it still differs: halves,
// then quarters, down to single steps, so that what is left is the input
// that shows the difference (ddmin's complement step, greedily).
func shrink(c *testCase, still func(*testCase) bool) *testCase {
	best := c
	for chunk := len(best.steps) / 2; chunk >= 1; chunk /= 2 {
		for i := 0; i+chunk <= len(best.steps); {
			try := *best
			try.steps = slices.Concat(best.steps[:i], best.steps[i+chunk:])
			if still(&try) {
				best = &try
			} else {
				i += chunk
			}
		}
	}
	return best
}
