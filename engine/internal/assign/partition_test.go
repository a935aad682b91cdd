package assign

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Kafka's UtilsTest.testMurmur2 vectors: Utils.murmur2 as a Java int.
var murmur2Vectors = []struct {
	in   string
	want int32
}{
	{"21", -973932308},
	{"foobar", -790332482},
	{"a-little-bit-long-string", -985981536},
	{"a-little-bit-longer-string", -1486304829},
	{"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971},
	{"abc", 479470107},
}

func TestMurmur2(t *testing.T) {
	for _, v := range murmur2Vectors {
		if got := int32(murmur2([]byte(v.in))); got != v.want {
			t.Errorf("murmur2(%q) = %d, want %d", v.in, got, v.want)
		}
	}
}

func TestPartitionKafkaValues(t *testing.T) {
	// Kafka: Utils.toPositive(Utils.murmur2(key)) % numPartitions.
	for _, v := range murmur2Vectors {
		for _, n := range []int32{1, 3, 12, 100} {
			want := (v.want & 0x7fffffff) % n
			if got := Partition([]byte(v.in), n); got != want {
				t.Errorf("Partition(%q, %d) = %d, want %d", v.in, n, got, want)
			}
		}
	}
	// "foobar" hashes to -790332482; toPositive gives 1357151166.
	if got := Partition([]byte("foobar"), 4); got != 1357151166%4 {
		t.Errorf("Partition(foobar, 4) = %d, want %d", got, 1357151166%4)
	}
}

// TestPartitionMatchesFranzGo cross-checks against the producer's default
// partitioner, which is what writes the keys we later look up.
func TestPartitionMatchesFranzGo(t *testing.T) {
	p := kgo.StickyKeyPartitioner(nil).ForTopic("t")
	rng := rand.New(rand.NewPCG(1, 1))
	for i := range 2000 {
		key := make([]byte, rng.IntN(40))
		for j := range key {
			key[j] = byte(rng.Uint32())
		}
		if i%2 == 0 {
			key = fmt.Appendf(nil, "customer-%d", i)
		}
		n := 1 + rng.IntN(64)
		want := p.Partition(&kgo.Record{Key: key}, n)
		if got := Partition(key, int32(n)); int(got) != want {
			t.Fatalf("Partition(%q, %d) = %d, franz-go says %d", key, n, got, want)
		}
	}
}
