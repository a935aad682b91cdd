package state

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
)

// The first byte of every pebble key says what the key holds.
const (
	tagFormat     byte = 0x00 // the layout version
	tagData       byte = 0x01 // a store's key
	tagCheckpoint byte = 0x02 // a changelog position
	tagStore      byte = 0x03 // a store partition held locally
	tagSegData    byte = 0x04 // a segmented store's key (Layout)
)

// formatVersion is the key and value layout this package writes. Open
// refuses a database written in another layout instead of misreading it.
const formatVersion = 1

var formatKey = []byte{tagFormat}

// namedKey is tag | uvarint(len(name)) | name | partition as 4 big-endian
// bytes. The length prefix makes the encoding injective: no store's prefix
// is a prefix of another store's or another partition's, so a prefix bound
// never leaks into a neighbour.
func namedKey(tag byte, name string, partition int32, extra int) []byte {
	k := make([]byte, 0, 1+binary.MaxVarintLen64+len(name)+4+extra)
	k = append(k, tag)
	k = binary.AppendUvarint(k, uint64(len(name)))
	k = append(k, name...)
	return binary.BigEndian.AppendUint32(k, uint32(partition))
}

// dataPrefix is the prefix of every key of one store partition; the user
// key follows it.
func dataPrefix(store string, partition int32) []byte {
	return namedKey(tagData, store, partition, 0)
}

// segDataPrefix is the prefix of every key of one segmented store
// partition, whatever its segment length (segPrefix).
func segDataPrefix(store string, partition int32, extra int) []byte {
	return namedKey(tagSegData, store, partition, extra)
}

func checkpointKey(topic string, partition int32) []byte {
	return namedKey(tagCheckpoint, topic, partition, 0)
}

func storeKey(store string, partition int32) []byte {
	return namedKey(tagStore, store, partition, 0)
}

// namedLen is the length of the namedKey that k begins with, 0 if k
// begins with none.
func namedLen(k []byte) int {
	if len(k) < 1 {
		return 0
	}
	n, w := binary.Uvarint(k[1:])
	if w <= 0 || n > uint64(len(k)) {
		return 0
	}
	if l := 1 + w + int(n) + 4; l <= len(k) {
		return l
	}
	return 0
}

// parseNamedKey reads what namedKey wrote.
func parseNamedKey(k []byte) (tag byte, name string, partition int32, err error) {
	if len(k) < 1 {
		return 0, "", 0, errors.New("empty key")
	}
	l := namedLen(k)
	if l != len(k) {
		return 0, "", 0, fmt.Errorf("malformed key %q", k)
	}
	_, w := binary.Uvarint(k[1:])
	return k[0], string(k[1+w : l-4]), int32(binary.BigEndian.Uint32(k[l-4:])), nil
}

// setEntry writes a key with its stored value: the writer's timestamp (Unix
// ms) as 8 big-endian bytes, then the value. The deferred set encodes in
// place, with no allocation per write.
func setEntry(b *pebble.Batch, key, value []byte, ts int64) error {
	op := b.SetDeferred(len(key), 8+len(value))
	copy(op.Key, key)
	appendEntry(op.Value[:0], value, ts)
	return op.Finish()
}

// appendEntry appends a stored value (the timestamp, then the value) to dst.
func appendEntry(dst, value []byte, ts int64) []byte {
	return append(binary.BigEndian.AppendUint64(dst, uint64(ts)), value...)
}

// decodeEntry copies a stored key (without its prefix) and value into one
// fresh allocation, so the entry outlives pebble's buffers.
func decodeEntry(key, stored []byte) (topo.Entry, error) {
	if len(stored) < 8 {
		return topo.Entry{}, fmt.Errorf("engine: state: value of key %q is %d bytes, shorter than its timestamp", key, len(stored))
	}
	buf := make([]byte, len(key)+len(stored)-8)
	n := copy(buf, key)
	copy(buf[n:], stored[8:])
	return topo.Entry{
		Key:       buf[:n:n],
		Value:     buf[n:],
		Timestamp: int64(binary.BigEndian.Uint64(stored)),
	}, nil
}

func encodeOffset(offset int64) []byte {
	return binary.BigEndian.AppendUint64(nil, uint64(offset))
}

func decodeOffset(b []byte) (int64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("engine: state: checkpoint is %d bytes, not 8", len(b))
	}
	return int64(binary.BigEndian.Uint64(b)), nil
}

// groupEnd is the end of the group of keys that key opens, for pebble's
// SpanPolicyFunc, which ends a flush's or compaction's table there: a
// store partition's keys (a segmented store's: one segment's) go to tables
// of their own. Without it one table holds the newest windows of every
// task's partitions and every segment they fall in, and compacting it
// rewrites every table of the older segments of the partitions between;
// with it, a table of new windows overlaps only the tables of its own
// partition's segment. Other keys (checkpoints and markers, a few per
// task) stay together by tag.
func groupEnd(key []byte) []byte {
	if len(key) == 0 {
		return nil
	}
	n := 1
	if tag := key[0]; tag == tagData || tag == tagSegData {
		if l := namedLen(key); l > 0 {
			n = l // through the partition
			if tag == tagSegData {
				n += 16 // the segment length, then the segment
			}
			if n > len(key) {
				n = 1
			}
		}
	}
	return topo.PrefixEnd(key[:n:n])
}
