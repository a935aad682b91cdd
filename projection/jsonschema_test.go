package projection_test

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/projection"
)

type base struct {
	ID string `json:"id"`
}

type item struct {
	base
	Name    string            `json:"name"`
	Price   int64             `json:"price_cents"`
	Weight  float64           `json:"weight,omitempty"`
	Tags    []string          `json:"tags"`
	Attrs   map[string]int    `json:"attrs,omitempty"`
	Since   time.Time         `json:"since"`
	Note    *string           `json:"note"`
	Raw     []byte            `json:"raw,omitempty"`
	Count   uint              `json:"count,string"`
	Hidden  string            `json:"-"`
	Plain   bool              // no tag: its Go name
	Next    *item             `json:"next,omitempty"`
	Free    any               `json:"free,omitempty"`
	private int               // unexported: not in the JSON
	Nested  struct{ A int }   `json:"nested"`
	Extra   json.RawMessage   `json:"extra,omitempty"`
	Opt     map[string]string `json:"opt,omitzero"`
}

// The schema is what encoding/json writes: checked by encoding a value and
// comparing each field's JSON type with the schema's.
func TestJSONSchema(t *testing.T) {
	got, _ := json.Marshal(projection.JSONSchema(reflect.TypeFor[item]()))
	var s map[string]any
	_ = json.Unmarshal(got, &s)
	want := `{"properties":{"Plain":{"type":"boolean"},"attrs":{"additionalProperties":{"type":"integer"},"type":["object","null"]},"count":{"type":"string"},"extra":{},"free":{},"id":{"type":"string"},"name":{"type":"string"},"nested":{"properties":{"A":{"type":"integer"}},"required":["A"],"type":"object"},"next":{},"note":{"type":["string","null"]},"opt":{"additionalProperties":{"type":"string"},"type":["object","null"]},"price_cents":{"type":"integer"},"raw":{"contentEncoding":"base64","type":["string","null"]},"since":{"format":"date-time","type":"string"},"tags":{"items":{"type":"string"},"type":["array","null"]},"weight":{"type":"number"}},"required":["id","name","price_cents","tags","since","note","count","Plain","nested"],"type":"object"}`
	if string(got) != want {
		t.Errorf("JSONSchema(item):\n got %s\nwant %s", got, want)
	}
	// Every field encoding/json writes is in the schema, with its type.
	note := "n"
	b, _ := json.Marshal(item{base: base{ID: "x"}, private: 1, Weight: 1.5, Attrs: map[string]int{"a": 1}, Note: &note, Raw: []byte("r"), Extra: json.RawMessage(`1`), Opt: map[string]string{"k": "v"}})
	var enc map[string]any
	_ = json.Unmarshal(b, &enc)
	props := s["properties"].(map[string]any)
	for name, v := range enc {
		p, ok := props[name].(map[string]any)
		if !ok {
			t.Errorf("field %q is not in the schema", name)
			continue
		}
		var types []string
		switch x := p["type"].(type) {
		case string:
			types = []string{x}
		case []any:
			for _, e := range x {
				types = append(types, e.(string))
			}
		}
		kind := "null"
		switch v.(type) {
		case string:
			kind = "string"
		case float64:
			kind = "number"
		case bool:
			kind = "boolean"
		case []any:
			kind = "array"
		case map[string]any:
			kind = "object"
		}
		if len(types) > 0 && !slices.Contains(types, kind) && !(kind == "number" && slices.Contains(types, "integer")) {
			t.Errorf("field %q: schema says %v, JSON has %s", name, types, kind)
		}
	}
}
