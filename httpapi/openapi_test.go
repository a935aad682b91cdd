package httpapi_test

import (
	"encoding/json"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/oxbow-dev/oxbow/httpapi"
)

// The OpenAPI document describes exactly the routes the handler serves.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	in, reg := shop(t)
	_, metrics, err := httpapi.PrometheusMetrics()
	if err != nil {
		t.Fatal(err)
	}
	h, err := httpapi.New(httpapi.Config{Instance: in, Views: reg, Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(h)
	defer s.Close()
	status, _, body := get(t, s, "/openapi.json")
	if status != 200 {
		t.Fatalf("/openapi.json: %d %s", status, body)
	}
	var doc struct {
		OpenAPI string                    `json:"openapi"`
		Paths   map[string]map[string]any `json:"paths"`
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatal(err)
	}
	var documented []string
	for path, ops := range doc.Paths {
		for method := range ops {
			documented = append(documented, strings.ToUpper(method)+" "+path)
		}
	}
	slices.Sort(documented)
	if routes := h.Routes(); !slices.Equal(documented, routes) {
		t.Errorf("documented\n  %s\nserved\n  %s", strings.Join(documented, "\n  "), strings.Join(routes, "\n  "))
	}
	if doc.OpenAPI != "3.1.0" || !strings.Contains(body, `"enum":["orders","stock"]`) {
		t.Errorf("the document: %s", body[:min(len(body), 300)])
	}
	// A service that takes no commands has no aggregate to name: no enum
	// (an empty or null one is invalid). The limit's bounds are the
	// router's.
	if strings.Contains(body, "null") {
		t.Errorf("the document has a null: %s", body)
	}
	var scan struct {
		Get struct {
			Parameters []struct {
				Name   string `json:"name"`
				Schema struct {
					Minimum, Maximum int
				} `json:"schema"`
			} `json:"parameters"`
		} `json:"get"`
	}
	raw, _ := json.Marshal(doc.Paths["/views/{view}/entries"])
	_ = json.Unmarshal(raw, &scan)
	found := false
	for _, p := range scan.Get.Parameters {
		if p.Name == "limit" {
			found = p.Schema.Minimum == 1 && p.Schema.Maximum == 1000
		}
	}
	if !found {
		t.Errorf("the scan's limit is not documented as 1 to 1000: %s", raw)
	}
}
