package state

import (
	"bytes"
	"context"
	"fmt"
)

// SetMaxRuns sets how many runs a Restorer keeps before it merges them,
// until the returned function restores it.
func SetMaxRuns(n int) (restore func()) {
	old := maxRuns
	maxRuns = n
	return func() { maxRuns = old }
}

// FlushMemtable flushes pebble's memtable into level 0.
func (db *DB) FlushMemtable() error { return db.pdb.Flush() }

// DataTablesAbove counts the tables above the bottom level whose keys
// include stores' keys (tagData or tagSegData).
func (db *DB) DataTablesAbove() (int, error) {
	levels, err := db.pdb.SSTables()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, tables := range levels[:len(levels)-1] {
		for _, t := range tables {
			lo, hi := t.Smallest.UserKey, t.Largest.UserKey
			// The tags in order: format, data, checkpoint, store, segdata.
			if len(lo) > 0 && len(hi) > 0 && (lo[0] <= tagData && hi[0] >= tagData || hi[0] >= tagSegData) {
				n++
			}
		}
	}
	return n, nil
}

// TableList lists the tables, a line each: level, key bounds, size.
func (db *DB) TableList() string {
	levels, _ := db.pdb.SSTables()
	s := ""
	for l, tables := range levels {
		for _, t := range tables {
			s += fmt.Sprintf("L%d %q..%q %d\n", l, t.Smallest.UserKey, t.Largest.UserKey, t.Size)
		}
	}
	return s
}

// TablesAcrossGroups lists the tables whose keys go past the end of the
// group of their first key (groupEnd), a line each.
func (db *DB) TablesAcrossGroups() ([]string, int, error) {
	levels, err := db.pdb.SSTables()
	if err != nil {
		return nil, 0, err
	}
	var across []string
	n := 0
	for l, tables := range levels {
		for _, t := range tables {
			n++
			lo, hi := t.Smallest.UserKey, t.Largest.UserKey
			if end := groupEnd(lo); end != nil && bytes.Compare(hi, end) >= 0 {
				across = append(across, fmt.Sprintf("L%d %q..%q", l, lo, hi))
			}
		}
	}
	return across, n, nil
}

// GroupEnd is groupEnd.
var GroupEnd = groupEnd

// CompactAll compacts every key into the bottom level.
func (db *DB) CompactAll() error {
	return db.pdb.Compact(context.Background(), []byte{0}, []byte{0xff}, false)
}
