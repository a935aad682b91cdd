package aggregate_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/oxbow-dev/oxbow/aggregate"
)

type event interface{ isEvent() }

type added struct {
	N int `json:"n"`
}

type removed struct {
	N      int    `json:"n"`
	Reason string `json:"reason"`
}

func (added) isEvent()   {}
func (removed) isEvent() {}

func TestTypesRoundTrip(t *testing.T) {
	ts := aggregate.NewTypes[event]()
	aggregate.Register[added](ts, "Added")
	aggregate.Register[removed](ts, "Removed")
	b, err := ts.Encode(removed{N: 2, Reason: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"type":"Removed","version":1,"data":{"n":2,"reason":"x"}}`; string(b) != want {
		t.Errorf("encoded %s, want %s", b, want)
	}
	v, err := ts.Decode(b)
	if err != nil || v != (removed{N: 2, Reason: "x"}) {
		t.Errorf("decoded %#v, %v", v, err)
	}
	if n, err := ts.NameOf(added{}); n != "Added" || err != nil {
		t.Errorf("NameOf = %q, %v", n, err)
	}
}

// Older versions of an event are upcast on read, through every version
// between, and may change their name.
func TestTypesUpcast(t *testing.T) {
	ts := aggregate.NewTypes[event]()
	aggregate.RegisterVersion[removed](ts, "Removed", 3)
	// Version 1 was "Taken" with a count; version 2 renamed it; version 3
	// added a reason.
	ts.Upcast("Taken", 1, func(data json.RawMessage) (string, json.RawMessage, error) {
		var v struct {
			Count int `json:"count"`
		}
		if err := json.Unmarshal(data, &v); err != nil {
			return "", nil, err
		}
		out, err := json.Marshal(map[string]int{"n": v.Count})
		return "Removed", out, err
	})
	ts.Upcast("Removed", 2, func(data json.RawMessage) (string, json.RawMessage, error) {
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			return "", nil, err
		}
		m["reason"] = "unknown"
		out, err := json.Marshal(m)
		return "", out, err
	})
	for in, want := range map[string]removed{
		`{"type":"Taken","version":1,"data":{"count":4}}`:                  {N: 4, Reason: "unknown"},
		`{"type":"Removed","version":2,"data":{"n":5}}`:                    {N: 5, Reason: "unknown"},
		`{"type":"Removed","version":3,"data":{"n":6,"reason":"damaged"}}`: {N: 6, Reason: "damaged"},
	} {
		got, err := ts.Decode([]byte(in))
		if err != nil || got != want {
			t.Errorf("Decode(%s) = %#v, %v; want %#v", in, got, err, want)
		}
	}
}

func TestTypesDecodeErrors(t *testing.T) {
	ts := aggregate.NewTypes[event]()
	aggregate.RegisterVersion[added](ts, "Added", 2)
	for in, want := range map[string]string{
		`not json`:                                      "not a type envelope",
		`{"data":{}}`:                                   `no "type"`,
		`{"type":"Nope","version":1,"data":{}}`:         `unknown type "Nope" (registered: Added)`,
		`{"type":"Added","version":3,"data":{}}`:        "schema version 3, newer than this program's 2",
		`{"type":"Added","version":1,"data":{}}`:        "no upcaster for Added from version 1",
		`{"type":"Added","version":2,"data":{"n":"x"}}`: `decode Added (version 2): field "n": string where an integer is expected`,
		`{"type":"Added","version":2,"data":{"n":1.5}}`: `field "n": number 1.5 where an integer is expected`,
		`{"type":"Added","version":2,"data":[1]}`:       `the value: array where an object is expected`,
	} {
		if _, err := ts.Decode([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Decode(%s): %v, want an error saying %q", in, err, want)
		}
	}
	if _, err := ts.Decode([]byte(`{"type":"Added","version":2,"data":{"n":"x"}}`)); strings.Contains(err.Error(), "Go struct") || strings.Contains(err.Error(), "json: ") {
		t.Errorf("the error speaks Go: %v", err)
	}
	// Unknown fields: taken by default (events outlive their schemas),
	// refused once RejectUnknownFields (commands, from outside).
	typo := []byte(`{"type":"Added","version":2,"data":{"n":1,"m":2}}`)
	if _, err := ts.Decode(typo); err != nil {
		t.Errorf("an unknown field, by default: %v", err)
	}
	ts.RejectUnknownFields()
	if _, err := ts.Decode(typo); err == nil || !strings.Contains(err.Error(), `unknown field "m"`) {
		t.Errorf("an unknown field, rejected: %v", err)
	}
	if _, err := ts.Encode(removed{}); err == nil || !strings.Contains(err.Error(), "not a registered type") {
		t.Errorf("Encode of an unregistered type: %v", err)
	}
}

// Registration problems are reported by New, all of them.
func TestTypesRegistrationProblems(t *testing.T) {
	ts := aggregate.NewTypes[event]()
	aggregate.Register[added](ts, "Added")
	aggregate.Register[added](ts, "Added2")
	aggregate.Register[removed](ts, "Added")
	aggregate.Register[string](ts, "String")
	aggregate.RegisterVersion[removed](ts, "Removed", 0)
	ts.Upcast("Added", 0, nil)
	_, err := aggregate.New(aggregate.Config[int, event, event]{
		Name: "x", Initial: func() int { return 0 },
		Decide:   func(int, event) ([]event, error) { return nil, nil },
		Evolve:   func(s int, _ event) int { return s },
		Commands: ts, Events: aggregate.NewTypes[event](),
	})
	if err == nil {
		t.Fatal("New accepted the problems")
	}
	for _, want := range []string{
		"registered twice (as \"Added\" and \"Added2\")",
		`type name "Added" is registered twice`,
		"string cannot be used as aggregate_test.event",
		"schema version 0 must be at least 1",
		"upcaster of \"Added\" from version 0",
		"Events: no type is registered",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q:\n%v", want, err)
		}
	}
	if errors.Unwrap(err) == nil {
		t.Error("the error wraps nothing")
	}
}
