package assign

// Partition returns the partition Kafka's default partitioner picks for a
// non-nil key: murmur2 of the key, made positive by clearing the sign bit
// (Kafka's Utils.toPositive), modulo the partition count. It matches the Java
// client and franz-go's default (kgo.StickyKeyPartitioner(nil)). It panics
// if numPartitions is not positive.
func Partition(key []byte, numPartitions int32) int32 {
	if numPartitions <= 0 {
		panic("assign: Partition needs a positive number of partitions")
	}
	return int32(murmur2(key)&0x7fffffff) % numPartitions
}

// murmur2 is Kafka's Utils.murmur2: MurmurHash2, 32-bit, seed 0x9747b28c.
func murmur2(b []byte) uint32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	h := seed ^ uint32(len(b))
	for ; len(b) >= 4; b = b[4:] {
		k := uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	switch len(b) {
	case 3:
		h ^= uint32(b[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(b[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(b[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}
