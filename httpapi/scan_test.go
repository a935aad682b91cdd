package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/oxbow-dev/oxbow/httpapi"
)

// Scans page through a view with an opaque cursor; prefixes and ranges
// narrow them.
func TestScan(t *testing.T) {
	in, reg := shop(t)
	s := serve(t, in, reg)
	page := func(path string) httpapi.Page {
		t.Helper()
		status, _, body := get(t, s, path)
		if status != 200 {
			t.Fatalf("GET %s: %d %s", path, status, body)
		}
		var p httpapi.Page
		if err := json.Unmarshal([]byte(body), &p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keys := func(p httpapi.Page) string {
		var out []string
		for _, e := range p.Entries {
			out = append(out, fmt.Sprint(e.Key))
		}
		return strings.Join(out, ",")
	}
	var all []string
	path := "/views/stock/entries"
	for {
		p := page(path)
		all = append(all, keys(p))
		if p.Next == "" {
			break
		}
		path = "/views/stock/entries?cursor=" + url.QueryEscape(p.Next)
	}
	if got := strings.Join(all, "|"); got != "blue,green|red,red-high|red-low,white" {
		t.Errorf("pages %s", got)
	}
	if got := keys(page("/views/stock/entries?prefix=red&limit=3")); got != "red,red-high,red-low" {
		t.Errorf("prefix red: %s", got)
	}
	if got := keys(page("/views/stock/entries?from=green&to=red-high&limit=3")); got != "green,red" {
		t.Errorf("from green to red-high: %s", got)
	}
	if got := keys(page("/views/stock/entries?prefix=zzz")); got != "" {
		t.Errorf("prefix zzz: %s", got)
	}
}
