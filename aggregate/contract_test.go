package aggregate_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/oxbow-dev/oxbow/aggregate"
	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
)

// addV2 is the command "Add" at schema version 2: its field was "n".
type addV2 struct {
	Count int `json:"count"`
}

// A service built on an older contract sends commands of an older schema
// version: the aggregate upcasts them, as readers upcast events. A command
// of a version newer than the aggregate's is rejected as malformed.
func TestCommandSchemaVersions(t *testing.T) {
	cmds := aggregate.NewTypes[addV2]()
	aggregate.RegisterVersion[addV2](cmds, "Add", 2)
	cmds.Upcast("Add", 1, func(data json.RawMessage) (string, json.RawMessage, error) {
		var v1 struct{ N int }
		if err := json.Unmarshal(data, &v1); err != nil {
			return "", nil, err
		}
		out, err := json.Marshal(addV2{Count: v1.N})
		return "", out, err
	})
	events := aggregate.NewTypes[event]()
	aggregate.Register[added](events, "Added")
	a, err := aggregate.New(aggregate.Config[int, addV2, event]{
		Name:    "counter",
		Initial: func() int { return 0 },
		Decide: func(_ int, c addV2) ([]event, error) {
			out := make([]event, c.Count)
			for i := range out {
				out[i] = added{N: 1}
			}
			return out, nil
		},
		Evolve:   func(s int, _ event) int { return s + 1 },
		Commands: cmds, Events: events,
	})
	if err != nil {
		t.Fatal(err)
	}
	c := a.Contract()
	if c.CommandTopic != "counter-commands" || c.EventTopic != "counter-events" || c.ReplyTopic != "counter-outcomes" {
		t.Errorf("the contract's topics: %+v", c)
	}
	b := engine.NewBuilder()
	a.AddTo(b)
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	d := enginetest.New(t, top)
	for i, tc := range []struct {
		envelope string
		status   aggregate.Status
		version  int64
	}{
		{`{"type":"Add","version":1,"data":{"n":2}}`, aggregate.Accepted, 2},
		{`{"type":"Add","data":{"n":1}}`, aggregate.Accepted, 3}, // no version: 1
		{`{"type":"Add","version":2,"data":{"count":3}}`, aggregate.Accepted, 6},
		{`{"type":"Add","version":3,"data":{"count":3}}`, aggregate.Rejected, 0}, // not read: no version
	} {
		if err := d.PipeBytes("counter-commands", []byte("c"), []byte(tc.envelope), enginetest.At(int64(i))); err != nil {
			t.Fatal(err)
		}
		replies := d.Messages("counter-outcomes")
		o, err := aggregate.DecodeOutcome(replies[len(replies)-1].Value)
		if err != nil {
			t.Fatal(err)
		}
		if o.Status != tc.status || o.Version != tc.version {
			t.Errorf("%s: %s at version %d, want %s at %d", tc.envelope, o.Status, o.Version, tc.status, tc.version)
		}
		if tc.status == aggregate.Rejected && (o.Rejection == nil || o.Rejection.Code != aggregate.CodeMalformedCommand || !strings.Contains(o.Rejection.Message, "newer")) {
			t.Errorf("%s: rejection %+v, want %s saying the version is newer", tc.envelope, o.Rejection, aggregate.CodeMalformedCommand)
		}
	}
}

// A contract from a types package alone: its topics default as the
// aggregate's do, and what is missing is said.
func TestContractCheck(t *testing.T) {
	cmds := aggregate.NewTypes[counterCmd]()
	aggregate.Register[counterCmd](cmds, "Add")
	events := aggregate.NewTypes[event]()
	aggregate.Register[added](events, "Added")
	c, err := aggregate.Contract[counterCmd, event]{Name: "counter", Commands: cmds, Events: events, ReplyTopic: "replies"}.Check()
	if err != nil {
		t.Fatal(err)
	}
	if c.CommandTopic != "counter-commands" || c.EventTopic != "counter-events" || c.ReplyTopic != "replies" {
		t.Errorf("topics %q %q %q, want the defaults and the reply topic given", c.CommandTopic, c.EventTopic, c.ReplyTopic)
	}
	if !events.Knows("Added") || events.Knows("Removed") {
		t.Error("Knows: want Added known and Removed not")
	}
	_, err = aggregate.Contract[counterCmd, event]{Events: aggregate.NewTypes[event]()}.Check()
	if err == nil || !strings.Contains(err.Error(), "Name is empty") || !strings.Contains(err.Error(), "registries") {
		t.Errorf("an empty contract: %v, want the name and the registries named", err)
	}
}
