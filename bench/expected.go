package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// inputModel is what the bench wrote to the input topic, kept so that each run's
// output can be checked against what a correct engine must give for it.
// Record n's value starts with n (8 bytes, big-endian), which numbers the
// records: first the generated ones (key n mod keys, event time base+n·step),
// then those the latency phases added, numbered on, each with its key and
// event time. Event times only grow within a partition: the generated ones
// by n, and every latency phase writes after the load with the time of
// writing.
type inputModel struct {
	keys    int
	base    time.Time
	step    time.Duration
	letters []byte // bytes 8 to 16 of each record's value, 8 a record
	liveKey []int32
	liveTs  []int64 // event times (ms) of the latency phases' records
}

// records is the number of records written.
func (in *inputModel) records() int { return len(in.letters) / 8 }

func (in *inputModel) generated() int { return in.records() - len(in.liveKey) }

// key is record n's key number (the key is k%08d of it).
func (in *inputModel) key(n int) int {
	if g := in.generated(); n >= g {
		return int(in.liveKey[n-g])
	}
	return n % in.keys
}

// eventTime is record n's event time in ms, as the broker has it.
func (in *inputModel) eventTime(n int) int64 {
	if g := in.generated(); n >= g {
		return in.liveTs[n-g]
	}
	return in.base.Add(time.Duration(n) * in.step).UnixMilli()
}

// head is the first 16 bytes of record n's value.
func (in *inputModel) head(n int) []byte {
	return append(binary.BigEndian.AppendUint64(make([]byte, 0, 16), uint64(n)), in.letters[8*n:8*n+8]...)
}

// addLive numbers a latency phase's record with key number k and event
// time ts, and returns its value.
func (in *inputModel) addLive(k int, ts time.Time, size int) []byte {
	v := make([]byte, max(size, 16))
	binary.BigEndian.PutUint64(v, uint64(in.records()))
	v[8] = 'b' // even: the stateless filter keeps it
	in.letters = append(in.letters, v[8:16]...)
	in.liveKey = append(in.liveKey, int32(k))
	in.liveTs = append(in.liveTs, ts.UnixMilli())
	return v
}

func keyName(k int) string { return fmt.Sprintf("k%08d", k) }

// What a correct engine must give for the input, topology by topology
// (topologies.go says what each does):
//
//   - stateless: for each record n whose value's byte 8 is even, the record
//     (its key, the first 16 bytes of its value);
//   - passthrough (a baseline): every record as it was read;
//   - join: for each record n, the record (its key, n as 8 bytes then the
//     table's value "t-<key>"): the table has every key, written before the
//     input with earlier event times, so every record joins;
//   - count: for each key, its number of records, as the last value of the
//     key in the output;
//   - window: for each key and each hopping window (5 minutes, advancing by
//     a minute, aligned on the epoch) holding some of its records, their
//     number, as the last value of "<key>@<start ms>". No record is late:
//     event times only grow within a partition (see inputModel), so stream time
//     never passes a window's end plus grace before its last record;
//   - tumbling: the same with 5-minute windows that do not overlap;
//   - sliding: for each key, the windows its records open — the window
//     ending at each record's time and, when the key's next record comes
//     within the time difference, the window starting 1 ms after the
//     record — each with the number of the key's records in it, both ends
//     included, as the last value of "<key>@<start ms>";
//   - session: for each key, its sessions (records at most the gap apart),
//     each with its number of records, as the last value of its key in the
//     session-windowed format; a session's earlier extents (merged into
//     it) end with a tombstone, or were never written.
//
// The stateless and join outputs are compared record by record: records are
// told apart by n, the first 8 bytes of their values. Exactly once, each
// expected record must be there exactly once and nothing else. At least
// once, as sets: each expected record must be there at least once and
// nothing else; repeated records (a retry, a task re-reading after a failed
// commit) are counted and reported, not wrong. The counts are compared by
// each key's last value: exactly once it must equal the expected count; at
// least once it must not be below it, since a task that re-reads inputs
// after a failed offset commit on state already in its changelog counts
// them again; keys above it are counted and reported, not wrong.

// verdict is a run's output against the expected.
type verdict struct {
	records  int    // output records read
	wrong    int    // keys with a wrong output
	example  string // one of them: key, expected, got
	repeated int    // at least once: records seen more than once, or keys counted above the expected
}

func (v verdict) String() string {
	if v.wrong == 0 {
		return "as expected"
	}
	return fmt.Sprintf("%d wrong keys, e.g. %s", v.wrong, v.example)
}

// checkOutput reads a run's output topic and checks it against what the
// input gives.
func checkOutput(ctx context.Context, brokers []string, in *inputModel, topology, guarantee, topic string) (verdict, error) {
	exact := guarantee == "eos"
	switch topology {
	case "stateless", "join", "passthrough":
		return checkRecords(ctx, brokers, in, topology, exact, topic)
	case "count", "window", "tumbling", "sliding", "session":
		return checkCounts(ctx, brokers, in, topology, exact, topic)
	}
	return verdict{}, fmt.Errorf("no expected output for topology %q", topology)
}

// expectedValue is the output value record n must give, if it gives one
// (for the passthrough, the beginning of it: the record as it was read,
// whose first 16 bytes are all the model keeps).
func expectedValue(in *inputModel, topology string, n int) ([]byte, bool) {
	switch topology {
	case "stateless":
		h := in.head(n)
		return h, h[8]&1 == 0
	case "passthrough":
		return in.head(n), true
	}
	return append(binary.BigEndian.AppendUint64(nil, uint64(n)), "t-"+keyName(in.key(n))...), true
}

func checkRecords(ctx context.Context, brokers []string, in *inputModel, topology string, exact bool, topic string) (verdict, error) {
	var v verdict
	seen := make([]uint8, in.records()) // times each record was output, up to 255
	wrongKeys := map[string]bool{}
	wrong := func(key, expected, got string) {
		if len(wrongKeys) == 0 {
			v.example = fmt.Sprintf("key %s: expected %s, got %s", key, expected, got)
		}
		wrongKeys[key] = true
	}
	n, err := readOutput(ctx, brokers, topic, func(r *kgo.Record) {
		if len(r.Value) >= 8 {
			if i := binary.BigEndian.Uint64(r.Value); i < uint64(len(seen)) {
				want, ok := expectedValue(in, topology, int(i))
				got := r.Value
				if topology == "passthrough" {
					got = got[:min(len(got), len(want))]
				}
				if ok && string(r.Key) == keyName(in.key(int(i))) && string(got) == string(want) {
					seen[i] = min(seen[i], 254) + 1
					return
				}
			}
		}
		wrong(string(r.Key), "no such record", "record "+describe(topology, r.Value))
	})
	if err != nil {
		return v, err
	}
	v.records = n
	for i := range seen {
		want, ok := expectedValue(in, topology, i)
		switch {
		case !ok:
		case seen[i] == 0:
			wrong(keyName(in.key(i)), "record "+describe(topology, want), "none")
		case seen[i] > 1 && exact:
			wrong(keyName(in.key(i)), "record "+describe(topology, want)+" once", fmt.Sprintf("it %d times", seen[i]))
		case seen[i] > 1:
			v.repeated += int(seen[i]) - 1
		}
	}
	v.wrong = len(wrongKeys)
	return v, nil
}

// windowMs is the size of the windows (the time difference of the sliding
// ones, the inactivity gap of the sessions), in ms.
const windowMs = int64(5 * time.Minute / time.Millisecond)

// keyTimes is each key's event times, in the order of its records: never
// down, since a key's records share a partition.
func keyTimes(in *inputModel) map[int][]int64 {
	times := map[int][]int64{}
	for i := range in.records() {
		k := in.key(i)
		times[k] = append(times[k], in.eventTime(i))
	}
	return times
}

// slidingCounts adds a key's sliding windows to expected: the window
// [t-d, t] of each record at t, and [t+1, t+1+d] when the next record
// comes after t and within it; each counts the records in it. (A record
// within d of the epoch would share the window [0, d]; the input's times
// are far from it.)
func slidingCounts(expected map[string]int64, key string, times []int64) {
	starts := map[int64]bool{}
	for i, t := range times {
		starts[t-windowMs] = true
		if i+1 < len(times) && times[i+1] > t && times[i+1] <= t+1+windowMs {
			starts[t+1] = true
		}
	}
	for s := range starts {
		lo, _ := slices.BinarySearch(times, s)
		hi, _ := slices.BinarySearch(times, s+windowMs+1)
		expected[key+"@"+strconv.FormatInt(s, 10)] = int64(hi - lo)
	}
}

// sessionCounts adds a key's sessions to expected, keyed as sessionName
// names them.
func sessionCounts(expected map[string]int64, key string, times []int64) {
	for i := 0; i < len(times); {
		j := i + 1
		for j < len(times) && times[j]-times[j-1] <= windowMs {
			j++
		}
		expected[sessionName(key, times[i], times[j-1])] = int64(j - i)
		i = j
	}
}

// sessionName is how the check names a session: "<key>@<start>-<end>".
func sessionName(key string, start, end int64) string {
	return key + "@" + strconv.FormatInt(start, 10) + "-" + strconv.FormatInt(end, 10)
}

// outputKey is how the check names an output key: as it is, but a
// session's, which is the key's bytes then the end and the start.
func outputKey(topology string, k []byte) string {
	if topology != "session" || len(k) < 16 {
		return string(k)
	}
	n := len(k)
	return sessionName(string(k[:n-16]), int64(binary.BigEndian.Uint64(k[n-8:])), int64(binary.BigEndian.Uint64(k[n-16:n-8])))
}

// windowKey is a key number and a window's start, in minutes.
type windowKey struct {
	key   int32
	start int64
}

// expectedCounts is the last value each key of a count or window output
// must have.
func expectedCounts(in *inputModel, topology string) map[string]int64 {
	expected := map[string]int64{}
	if topology == "count" {
		counts := make([]int64, in.keys)
		for i := range in.records() {
			counts[in.key(i)]++
		}
		for k, c := range counts {
			if c > 0 {
				expected[keyName(k)] = c
			}
		}
		return expected
	}
	switch topology {
	case "tumbling":
		for i := range in.records() {
			t := in.eventTime(i)
			expected[keyName(in.key(i))+"@"+strconv.FormatInt(t-t%windowMs, 10)]++
		}
		return expected
	case "sliding", "session":
		for k, times := range keyTimes(in) {
			if topology == "sliding" {
				slidingCounts(expected, keyName(k), times)
			} else {
				sessionCounts(expected, keyName(k), times)
			}
		}
		return expected
	}
	// Records per key and minute; a window is the 5 minutes from its start,
	// so each minute's records are in the windows starting in it and the 4
	// minutes before.
	const minute, windowMinutes = int64(time.Minute / time.Millisecond), 5
	perMinute := map[windowKey]int64{}
	for i := range in.records() {
		perMinute[windowKey{int32(in.key(i)), in.eventTime(i) / minute}]++
	}
	windows := map[windowKey]int64{}
	for m, c := range perMinute {
		for s := max(m.start-windowMinutes+1, 0); s <= m.start; s++ {
			windows[windowKey{m.key, s}] += c
		}
	}
	for w, c := range windows {
		expected[keyName(int(w.key))+"@"+strconv.FormatInt(w.start*minute, 10)] = c
	}
	return expected
}

func checkCounts(ctx context.Context, brokers []string, in *inputModel, topology string, exact bool, topic string) (verdict, error) {
	var v verdict
	expected := expectedCounts(in, topology)
	last := map[string][]byte{}
	n, err := readOutput(ctx, brokers, topic, func(r *kgo.Record) { last[outputKey(topology, r.Key)] = r.Value })
	if err != nil {
		return v, err
	}
	v.records = n
	// Sorted, so that the example is the same from run to run.
	var keys []string
	for k := range expected {
		keys = append(keys, k)
	}
	for k := range last {
		if _, ok := expected[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		want, ok := expected[k]
		got, output := last[k]
		var bad bool
		switch {
		case !ok && output && got == nil && topology == "session":
			// An extent of a session that grew: removed.
		case !ok || !output || len(got) != 8:
			bad = true
		case int64(binary.BigEndian.Uint64(got)) == want:
		case int64(binary.BigEndian.Uint64(got)) > want && !exact:
			v.repeated++
		default:
			bad = true
		}
		if bad {
			if v.wrong == 0 {
				e, g := "no output", "no output"
				if ok {
					e = strconv.FormatInt(want, 10)
				}
				if output {
					g = describe(topology, got)
				}
				v.example = fmt.Sprintf("key %s: expected %s, got %s", k, e, g)
			}
			v.wrong++
		}
	}
	return v, nil
}

// describe renders an output value for a message.
func describe(topology string, v []byte) string {
	switch {
	case v == nil:
		return "a tombstone"
	case len(v) == 8 && topology != "join" && topology != "stateless" && topology != "passthrough":
		return strconv.FormatInt(int64(binary.BigEndian.Uint64(v)), 10)
	case topology == "join" && len(v) >= 8:
		return fmt.Sprintf("%d|%q", binary.BigEndian.Uint64(v), v[8:])
	case (topology == "stateless" || topology == "passthrough") && len(v) >= 16:
		return fmt.Sprintf("%d|%q", binary.BigEndian.Uint64(v), v[8:])
	}
	return fmt.Sprintf("%q", v)
}

// readOutput reads a topic to its partitions' end offsets (read committed)
// and calls f for each record, in each partition's order; it returns the
// number of records.
func readOutput(ctx context.Context, brokers []string, topic string, f func(*kgo.Record)) (int, error) {
	// Transaction markers are kept, so that every partition is read to
	// its end offset exactly; they are not counted.
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		return 0, err
	}
	remaining := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			remaining[o.Partition] = o.Offset
		}
	})
	rctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	n := 0
	for len(remaining) > 0 {
		fs := cl.PollFetches(rctx)
		if rctx.Err() != nil {
			return 0, fmt.Errorf("reading %s: partitions %v not read to their ends in 5 minutes", topic, remaining)
		}
		if err := fetchErr(fs); err != nil {
			return 0, err
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset+1 >= remaining[r.Partition] {
				delete(remaining, r.Partition)
			}
			if r.Attrs.IsControl() {
				return
			}
			n++
			f(r)
		})
	}
	return n, nil
}

// mismatch names a run whose output is wrong (phase: "" for its
// throughput phase).
func mismatch(r run, phase string, v verdict) string {
	name := []string{fmt.Sprintf("repetition %d, %s:", r.rep+1, r.config), r.topology, r.engine, r.guarantee}
	if phase != "" {
		name = append(name, phase)
	}
	return strings.Join(name, " ") + ": " + v.String()
}
