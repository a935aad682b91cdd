package difftest

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// A testCase is one topology of the catalog, its parameters, and the steps
// replayed through it: the spec both engines read. Written out (writeCase) it
// is what the Kafka Streams side reads on its stdin.
type testCase struct {
	id     string
	op     *op
	params params
	steps  []step
}

// A step pipes one record into a topic, or advances the wall clock.
type step struct {
	wall       int64  // > 0: advance the wall clock by this many ms; the rest is unused
	topic      string // the topic piped into
	key, value []byte // nil: a null key, a tombstone
	ts         int64  // the record's timestamp, ms since the Unix epoch
}

// params are a case's parameters, by name; values are decimal numbers or words.
type params map[string]string

func (p params) ms(name string) int64 {
	v, err := strconv.ParseInt(p[name], 10, 64)
	if err != nil {
		panic(fmt.Sprintf("difftest: parameter %s=%q is not a number", name, p[name]))
	}
	return v
}

func (p params) bool(name string) bool { return p[name] == "1" }

// record is an output record as both sides report it.
type record struct {
	topic      string
	key, value []byte
	ts         int64
}

// result is what a case gave: the records each step wrote to the outputs (in
// the order the op lists its outputs, each topic's in the order written), and
// the step that failed, if one did (-1: building the topology).
type result struct {
	steps   [][]record
	failed  bool
	failAt  int
	failMsg string
}

// hexOrNull writes bytes as the protocol does: "~" for nil, "-" for none.
func hexOrNull(b []byte) string {
	switch {
	case b == nil:
		return "~"
	case len(b) == 0:
		return "-"
	}
	return hex.EncodeToString(b)
}

func bytesOf(s string) ([]byte, error) {
	switch s {
	case "~":
		return nil, nil
	case "-":
		return []byte{}, nil
	}
	return hex.DecodeString(s)
}

// writeCase writes a case in the protocol of the Kafka Streams side.
func writeCase(w *bufio.Writer, c *testCase) {
	fmt.Fprintf(w, "case %s %s outputs=%s", c.id, c.op.twin, strings.Join(c.op.outputTopics(), ","))
	for _, k := range slices.Sorted(maps.Keys(c.params)) {
		fmt.Fprintf(w, " %s=%s", k, c.params[k])
	}
	w.WriteByte('\n')
	for _, s := range c.steps {
		if s.wall > 0 {
			fmt.Fprintf(w, "wall %d\n", s.wall)
			continue
		}
		fmt.Fprintf(w, "pipe %s %s %s %d\n", s.topic, hexOrNull(s.key), hexOrNull(s.value), s.ts)
	}
	w.WriteString("end\n")
}

// readResult reads one case's result from the Kafka Streams side.
func readResult(r *bufio.Reader) (id string, res result, err error) {
	line := func() (string, error) {
		l, err := r.ReadString('\n')
		if err != nil {
			return "", fmt.Errorf("reading the Kafka Streams side's output: %w (last: %q)", err, l)
		}
		return strings.TrimSuffix(l, "\n"), nil
	}
	l, err := line()
	if err != nil {
		return "", res, err
	}
	f := strings.Fields(l)
	if len(f) != 2 || f[0] != "result" {
		return "", res, fmt.Errorf("the Kafka Streams side wrote %q, want result <id>", l)
	}
	id = f[1]
	for {
		if l, err = line(); err != nil {
			return id, res, err
		}
		f := strings.Fields(l)
		switch {
		case len(f) == 1 && f[0] == "done":
			return id, res, nil
		case len(f) == 2 && f[0] == "step":
			res.steps = append(res.steps, nil)
		case len(f) == 5 && f[0] == "out" && len(res.steps) > 0:
			var rec record
			rec.topic = f[1]
			if rec.key, err = bytesOf(f[2]); err == nil {
				if rec.value, err = bytesOf(f[3]); err == nil {
					rec.ts, err = strconv.ParseInt(f[4], 10, 64)
				}
			}
			if err != nil {
				return id, res, fmt.Errorf("the Kafka Streams side wrote %q: %w", l, err)
			}
			res.steps[len(res.steps)-1] = append(res.steps[len(res.steps)-1], rec)
		case len(f) == 3 && f[0] == "fail":
			res.failed = true
			res.failAt, _ = strconv.Atoi(f[1])
			msg, _ := hex.DecodeString(f[2])
			res.failMsg = string(msg)
		default:
			return id, res, fmt.Errorf("the Kafka Streams side wrote %q", l)
		}
	}
}
