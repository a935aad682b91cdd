package httpapi_test

import (
	"strings"
	"testing"
)

// A read with ?minPosition= answers once the instance reflects the
// position, or says that it does not yet.
func TestMinPosition(t *testing.T) {
	in, reg := shop(t)
	s := serve(t, in, reg)
	for _, c := range []struct {
		path   string
		status int
		body   string
	}{
		{"/views/stock/keys/red?minPosition=stock:0:5", 200, `{"key":"red","value":12}`},
		{"/views/stock/keys/red?minPosition=stock:0:6", 503, "does not reflect stock:0:6 (at 6) yet"},
		{"/views/stock/keys/red?minPosition=stock:1:0", 503, "stock:1:0 (at nothing known of it here yet)"},
		{"/views/stock/entries?limit=1&minPosition=stock:0:2&minPosition=orders:0:0", 200, `"key":"blue"`},
		{"/views/stock/keys/red?minPosition=stock:0", 400, "want <topic>:<partition>:<offset>"},
		{"/views/stock/keys/red?minPosition=stock:x:1", 400, "want <topic>:<partition>:<offset>"},
		{"/views/stock/keys/red?after=1", 400, `\"after\" is not a parameter of a key read`},
	} {
		status, _, body := get(t, s, c.path)
		if status != c.status || !strings.Contains(body, c.body) {
			t.Errorf("GET %s: %d %s, want %d with %s", c.path, status, body, c.status, c.body)
		}
	}
}
