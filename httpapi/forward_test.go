package httpapi_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/oxbow-dev/oxbow/engine"
)

// remote is an instance that holds none of the keys: every read says
// which instance does.
type remote struct {
	*instance
	owner string // its address
}

func (r *remote) LocalStore(name string) (engine.RawStore, error) {
	st, err := r.instance.LocalStore(name)
	if err != nil {
		return nil, err
	}
	return notLocal{st, r.owner}, nil
}

type notLocal struct {
	engine.RawStore
	owner string
}

var _ engine.RawStore = notLocal{}

func (n notLocal) Get([]byte) (engine.RawEntry, bool, error) {
	e := &engine.NotLocalError{Store: n.Name()}
	e.Owner.ID, e.Owner.Addr = "i2", n.owner
	return engine.RawEntry{}, false, e
}

// A key another instance owns is forwarded to it, once: the owner answers;
// an instance that gets a forwarded request for a key it does not hold
// answers 421 instead of forwarding again.
func TestForwardToOwner(t *testing.T) {
	in, reg := shop(t)
	owner := serve(t, in, reg)
	addr := strings.TrimPrefix(owner.URL, "http://")
	elsewhere := serve(t, &remote{instance: &instance{Driver: in.Driver, state: engine.AppRunning, id: "i3"}, owner: addr}, reg)
	resp, err := http.Get(elsewhere.URL + "/views/stock/keys/red")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || strings.TrimSpace(string(b)) != `{"key":"red","value":12}` || resp.Header.Get("Oxbow-Served-By") != "i2" {
		t.Errorf("forwarded: %d %s (served by %q)", resp.StatusCode, b, resp.Header.Get("Oxbow-Served-By"))
	}
	// A loop: two instances that each think the other owns the key.
	loopA := &remote{instance: &instance{Driver: in.Driver, state: engine.AppRunning, id: "a"}}
	sa := serve(t, loopA, reg)
	sb := serve(t, &remote{instance: &instance{Driver: in.Driver, state: engine.AppRunning, id: "b"}, owner: strings.TrimPrefix(sa.URL, "http://")}, reg)
	loopA.owner = strings.TrimPrefix(sb.URL, "http://")
	status, _, body := get(t, sa, "/views/stock/keys/red")
	if status != http.StatusMisdirectedRequest || !strings.Contains(body, "forwarded the request here") {
		t.Errorf("a forwarding loop: %d %s", status, body)
	}
	// An owner without an address, or none (rebalancing): 503, retry.
	noAddr := serve(t, &remote{instance: &instance{Driver: in.Driver, state: engine.AppRunning, id: "c"}}, reg)
	status, _, body = get(t, noAddr, "/views/stock/keys/red")
	if status != 503 || !strings.Contains(body, "AdvertisedAddr") {
		t.Errorf("an owner without an address: %d %s", status, body)
	}
}
