package state_test

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/oxbow-dev/oxbow/engine/internal/state"
)

const (
	benchKeys     = 100_000
	benchValueLen = 100
	// benchCommitEvery models a commit interval: a task commits its pending
	// batch after this many writes.
	benchCommitEvery = 10_000
)

func benchKey(buf []byte, i int) []byte {
	return binary.BigEndian.AppendUint64(append(buf[:0], "key-"...), uint64(i))
}

// BenchmarkPut writes 100-byte values over 100k keys through a task's
// pending batch, committing every 10k writes.
func BenchmarkPut(b *testing.B) {
	db := openDB(b, b.TempDir(), state.Options{})
	task := db.Task()
	s := task.Store("bench", 0)
	value := make([]byte, benchValueLen)
	var key []byte
	b.SetBytes(benchValueLen)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		key = benchKey(key, i%benchKeys)
		if err := s.Put(key, value, int64(i)); err != nil {
			b.Fatal(err)
		}
		i++
		if i%benchCommitEvery == 0 {
			if err := task.Commit(); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := task.Commit(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkGet reads random keys of 100k committed 100-byte values, through
// a task whose pending batch is empty (Committed) or holds 10k of the keys
// (Pending).
func BenchmarkGet(b *testing.B) {
	for _, pending := range []bool{false, true} {
		name := "Committed"
		if pending {
			name = "Pending"
		}
		b.Run(name, func(b *testing.B) {
			db := openDB(b, b.TempDir(), state.Options{})
			task := db.Task()
			s := task.Store("bench", 0)
			value := make([]byte, benchValueLen)
			var key []byte
			for i := range benchKeys {
				key = benchKey(key, i)
				if err := s.Put(key, value, int64(i)); err != nil {
					b.Fatal(err)
				}
				if (i+1)%benchCommitEvery == 0 {
					if err := task.Commit(); err != nil {
						b.Fatal(err)
					}
				}
			}
			if pending {
				for i := range benchCommitEvery {
					key = benchKey(key, i*(benchKeys/benchCommitEvery))
					if err := s.Put(key, value, 0); err != nil {
						b.Fatal(err)
					}
				}
			}
			rng := rand.New(rand.NewPCG(1, 2))
			b.ReportAllocs()
			for b.Loop() {
				key = benchKey(key, rng.IntN(benchKeys))
				if _, ok, err := s.Get(key); err != nil || !ok {
					b.Fatal(ok, err)
				}
			}
		})
	}
}

// BenchmarkRestore applies a changelog of distinct keys (11 bytes of key,
// 100 of value, as bench's restore curve) through a Restorer and syncs it,
// a byte a second reported as the changelog's keys and values: what
// pebble's side of a restore costs, to set against the consumer's read of
// the same bytes. In order=random the keys come in random order, as a
// compacted changelog's do (its order is the order of each key's last
// update): each batch's table overlaps the ones before it, and pebble's
// compactions merge them. In order=sorted each batch's keys follow the
// previous batch's: every table lands at the bottom, no compaction.
func BenchmarkRestore(b *testing.B) {
	const records = 2_000_000
	// Values of random letters: as compressible as the curve's.
	values := make([][]byte, 1024)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range values {
		values[i] = make([]byte, benchValueLen)
		for j := range values[i] {
			values[i][j] = byte('a' + rng.IntN(26))
		}
	}
	for _, order := range []string{"random", "sorted"} {
		b.Run("order="+order, func(b *testing.B) {
			keys := make([][]byte, records)
			for i, j := range rand.New(rand.NewPCG(1, 2)).Perm(records) {
				if order == "sorted" {
					j = i
				}
				keys[i] = fmt.Appendf(nil, "k%010d", j)
			}
			b.SetBytes(int64(records * (11 + benchValueLen)))
			for b.Loop() {
				b.StopTimer()
				db := openDB(b, b.TempDir(), state.Options{})
				b.StartTimer()
				r, err := db.Restorer("bench", 0)
				if err != nil {
					b.Fatal(err)
				}
				for i, k := range keys {
					if err := r.Apply(int64(i), k, values[i%len(values)], int64(i)); err != nil {
						b.Fatal(err)
					}
				}
				if err := r.Flush(records); err != nil {
					b.Fatal(err)
				}
				if err := r.Close(); err != nil {
					b.Fatal(err)
				}
				m := db.PebbleMetrics()
				t := m.Total()
				b.Logf("ingested %d MB, compacted %d MB in %d compactions; L0 %d tables", t.TableBytesIngested>>20, t.TableBytesCompacted>>20, m.Compact.Count, m.Levels[0].TablesCount)
			}
		})
	}
}
