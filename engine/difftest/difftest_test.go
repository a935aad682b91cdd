package difftest

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"testing"

	"go.uber.org/goleak"
)

var (
	flagSeeds = flag.Int("difftest.seeds", 200, "seeds (cases) per op")
	flagSeed  = flag.Uint64("difftest.seed", 1, "the first seed")
	flagOps   = flag.String("difftest.ops", "", "a regexp: run only the ops whose names it matches")
	flagShow  = flag.Int("difftest.show", 2, "differences shown (shrunk) per op")
	// Kafka Streams' RocksDB stores and its in-memory ones differ (emit-final
	// windows, for one); RocksDB is its default, and the oracle.
	flagStores = flag.String("difftest.stores", "rocksdb", "the Kafka Streams side's DSL stores: rocksdb or memory")
)

var ks *kstreams

func TestMain(m *testing.M) {
	flag.Parse()
	var err error
	ks, err = startKStreams()
	switch {
	case errors.Is(err, errNoJava) && os.Getenv("CI") == "":
		fmt.Fprintln(os.Stderr, err, "- the differential tests skip")
	case err != nil:
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if ks != nil {
		if err := ks.close(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	// After the teardown: the Kafka Streams process's goroutines end with it.
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// TestKafkaStreams runs every op of the catalog on many seeds through both
// engines and fails on any difference, showing each (shrunk) as a table of
// steps. -difftest.seeds sets how many; -difftest.ops picks ops.
func TestKafkaStreams(t *testing.T) {
	if ks == nil {
		t.Skip(errNoJava)
	}
	only, err := regexp.Compile(*flagOps)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range catalog {
		if !only.MatchString(o.name) {
			continue
		}
		t.Run(o.name, func(t *testing.T) {
			cases := make([]*testCase, *flagSeeds)
			for i := range cases {
				cases[i] = generate(o, *flagSeed+uint64(i))
			}
			want, err := ks.run(cases)
			if err != nil {
				t.Fatal(err)
			}
			failed, unbuilt, refBugs := 0, 0, map[string]int{}
			for i, c := range cases {
				got := runOxbow(c)
				if want[i].failed && want[i].failAt < 0 && got.failed && got.failAt < 0 {
					unbuilt++
				}
				if why := referenceBug(c, want[i]); why != "" {
					refBugs[why]++
				}
				if !differs(c, want[i], got) {
					continue
				}
				failed++
				if failed > *flagShow {
					continue
				}
				min := shrink(c, func(c *testCase) bool {
					res, err := ks.run([]*testCase{c})
					return err == nil && differs(c, res[0], runOxbow(c))
				})
				res, err := ks.run([]*testCase{min})
				if err != nil {
					t.Fatal(err)
				}
				t.Errorf("seed %d differs; shrunk from %d steps to %d (-difftest.ops='^%s$' -difftest.seed=%d -difftest.seeds=1):\n%s",
					*flagSeed+uint64(i), len(c.steps), len(min.steps), regexp.QuoteMeta(o.name), *flagSeed+uint64(i), report(min, res[0], runOxbow(min)))
			}
			for why, n := range refBugs {
				t.Logf("%d of %d seeds compared only up to a known failure of Kafka Streams: %s", n, len(cases), why)
			}
			if failed > 0 {
				t.Errorf("%d of %d seeds differ", failed, len(cases))
			}
			if unbuilt == len(cases) {
				t.Errorf("no seed's topology builds on either side: the op compares nothing")
			}
		})
	}
}
