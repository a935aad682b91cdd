package state

import (
	"bytes"
	"testing"
)

func TestNamedKeys(t *testing.T) {
	names := []string{"", "s", "s\x00", "s\xff", "st", "a-much-longer-store-name"}
	parts := []int32{0, 1, 7, -1, 1 << 30}
	type sp struct {
		name string
		p    int32
	}
	var all []sp
	for _, n := range names {
		for _, p := range parts {
			all = append(all, sp{n, p})
		}
	}
	for _, a := range all {
		k := dataPrefix(a.name, a.p)
		tag, name, p, err := parseNamedKey(k)
		if err != nil || tag != tagData || name != a.name || p != a.p {
			t.Fatalf("parse(%q) = %x %q %d %v, want %q %d", k, tag, name, p, err, a.name, a.p)
		}
		// No partition's prefix is a prefix of another's: ranges cannot leak.
		for _, b := range all {
			if a != b && bytes.HasPrefix(dataPrefix(b.name, b.p), k) {
				t.Errorf("prefix of %q/%d is a prefix of %q/%d's", a.name, a.p, b.name, b.p)
			}
		}
	}
	for _, bad := range [][]byte{nil, {tagData}, {tagData, 5, 'a'}, append(storeKey("s", 1), 0)} {
		if _, _, _, err := parseNamedKey(bad); err == nil {
			t.Errorf("parse(%q) accepted a malformed key", bad)
		}
	}
}

func TestDecodeEntry(t *testing.T) {
	if _, err := decodeEntry([]byte("k"), []byte{1, 2, 3}); err == nil {
		t.Fatal("a value shorter than its timestamp decoded")
	}
	if _, err := decodeOffset([]byte{1}); err == nil {
		t.Fatal("a short checkpoint decoded")
	}
}
