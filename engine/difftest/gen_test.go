package difftest

import (
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"strconv"
)

// generate makes an op's case for a seed: the op's numeric parameters, the
// record cache on or off, and up to 24 steps. Keys come from a few per topic
// (a random subset of the input's, so that joins and windows collide) and
// now and then are null; values are small numbers, now and then tombstones
// (more often for tables); timestamps mostly move forward by a few
// milliseconds, sometimes repeat the one before, sometimes lie up to 30ms in
// the past (out of order, or late for a window); now and then the wall
// clock moves instead. The same op and seed always give the same case.
func generate(o *op, seed uint64) *testCase {
	h := fnv.New64a()
	h.Write([]byte(o.name))
	r := rand.New(rand.NewPCG(seed, h.Sum64()))
	p := maps.Clone(o.fixed)
	if o.draw != nil {
		o.draw(r, p)
	}
	p["cache"] = strconv.Itoa(r.IntN(2))

	pools := make([][]string, len(o.inputs))
	for i, in := range o.inputs {
		pool := slicesShuffled(r, in.keys)
		pools[i] = pool[:1+r.IntN(len(pool))]
	}
	clock := int64(1000 + r.IntN(100))
	if r.IntN(4) == 0 {
		clock = 0 // near the epoch: windows that would start before it
	}
	c := &testCase{id: o.name + "#" + strconv.FormatUint(seed, 10), op: o, params: p}
	last := clock
	for range 1 + r.IntN(24) {
		if r.IntN(12) == 0 {
			c.steps = append(c.steps, step{wall: int64(1 + r.IntN(1500))})
			continue
		}
		i := r.IntN(len(o.inputs))
		in := o.inputs[i]
		s := step{topic: in.topic}
		if r.IntN(20) != 0 {
			s.key = []byte(pools[i][r.IntN(len(pools[i]))])
		}
		tombstones := 12
		if in.table {
			tombstones = 5
		}
		if r.IntN(tombstones) != 0 {
			s.value = []byte(strconv.Itoa(r.IntN(10)))
		}
		switch r.IntN(10) {
		case 0:
			s.ts = last
		case 1:
			s.ts = max(0, clock-int64(r.IntN(31)))
		default:
			clock += int64(r.IntN(6))
			s.ts = clock
		}
		last = s.ts
		c.steps = append(c.steps, s)
	}
	return c
}

func slicesShuffled(r *rand.Rand, s []string) []string {
	out := append([]string(nil), s...)
	r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}
