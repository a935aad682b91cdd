package engine

import (
	"reflect"
	"testing"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
)

// Fields and headers come back as written: a nil header value stays nil,
// an empty one empty; bytes cut short at any point read as not ok.
func TestFieldsRoundTrip(t *testing.T) {
	hs := []topo.Header{{Key: "a", Value: []byte("1")}, {Key: "nil"}, {Key: "", Value: []byte{}}}
	b := appendHeaders(appendField(appendField(nil, []byte("key")), []byte{}), hs)
	f := newFieldReader(b)
	if k, v, got := f.field(), f.field(), f.headers(); !f.ok || string(k) != "key" || v == nil || len(v) != 0 || !reflect.DeepEqual(got, hs) {
		t.Fatalf("read %q, %q, %v (ok %v); want key, empty, %v", k, v, got, f.ok, hs)
	}
	if len(f.rest) != 0 {
		t.Errorf("%d bytes left over", len(f.rest))
	}
	for n := range len(b) {
		f := newFieldReader(b[:n])
		f.field()
		f.field()
		f.headers()
		if f.ok {
			t.Errorf("%d of %d bytes read as whole", n, len(b))
		}
	}
}
