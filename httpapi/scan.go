package httpapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/projection"
)

// Page is one page of a scan.
type Page struct {
	Entries []projection.Entry `json:"entries"`
	// Next, if set, is the cursor of the next page.
	Next string `json:"next,omitempty"`
}

// scan answers a page of a view's entries, gathered from every instance
// of the group (each answers its partitions' first entries after the
// cursor; the page is the first of them all, in stored key order):
// ?from=&to= (a key range, to excluded), ?prefix= (text keys), ?limit=,
// ?cursor= (the Next of the page before), ?minPosition= (each instance
// waits for the positions of the partitions it processes).
func (a *api) scan(w http.ResponseWriter, r *http.Request) {
	v, ok := a.view(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	for k := range q {
		switch k {
		case "from", "to", "prefix", "limit", "cursor", "minPosition":
		default:
			a.problem(w, r, http.StatusBadRequest, "bad parameter", fmt.Sprintf("%q is not a parameter of a scan (from, to, prefix, limit, cursor)", k))
			return
		}
	}
	limit := a.cfg.DefaultLimit
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > a.cfg.MaxLimit {
			a.problem(w, r, http.StatusBadRequest, "bad limit", fmt.Sprintf("limit %q: want a number from 1 to %d", s, a.cfg.MaxLimit))
			return
		}
		limit = n
	}
	s := projection.Scan{Prefix: q.Get("prefix"), From: q.Get("from"), To: q.Get("to"), HasFrom: q.Has("from"), HasTo: q.Has("to")}
	if c := q.Get("cursor"); c != "" {
		after, err := decodeCursor(v.Name(), c)
		if err != nil {
			a.problem(w, r, http.StatusBadRequest, "bad cursor", err.Error())
			return
		}
		s.After = after
	}
	if !a.awaitPositionsOf(w, r, v, true) {
		return
	}
	local, more, err := a.localPage(r, v, s, limit)
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	if r.Header.Get(scanLocalHeader) != "" {
		// A peer gathering a scan: this instance's page, with raw keys.
		a.json(w, http.StatusOK, localPage{Entries: local, More: more})
		return
	}
	peers, err := a.peers()
	if err != nil {
		w.Header().Set("Retry-After", "1")
		a.problem(w, r, http.StatusServiceUnavailable, "scan unavailable", err.Error())
		return
	}
	all := local
	for _, p := range peers {
		page, err := a.peerPage(r, p)
		if err != nil {
			a.problem(w, r, http.StatusBadGateway, "scan failed", fmt.Sprintf("instance %s (%s): %v", p.ID, p.Addr, err))
			return
		}
		all = append(all, page.Entries...)
		more = more || page.More
	}
	// Each instance's page is in key order and holds its first limit keys
	// after the cursor: the first limit of them all are the page.
	slices.SortFunc(all, func(x, y rawEntry) int { return bytes.Compare(x.Raw, y.Raw) })
	page := Page{Entries: []projection.Entry{}}
	for i, e := range all {
		if i == limit {
			more = true
			break
		}
		page.Entries = append(page.Entries, projection.Entry{Key: e.Key, Value: e.Value})
	}
	if more && len(page.Entries) > 0 {
		page.Next = encodeCursor(v.Name(), all[len(page.Entries)-1].Raw)
	}
	a.json(w, http.StatusOK, page)
}

// scanLocalHeader marks the request of an instance gathering a scan from
// its peers: answer this instance's partitions only, with raw keys.
const scanLocalHeader = "Oxbow-Scan-Local"

// rawEntry is an entry with its stored key, as a peer answers a gathered
// scan.
type rawEntry struct {
	Key   any    `json:"key"`
	Value any    `json:"value"`
	Raw   []byte `json:"raw"`
}

type localPage struct {
	Entries []rawEntry `json:"entries"`
	More    bool       `json:"more"`
}

// localPage reads up to limit entries of this instance's partitions.
func (a *api) localPage(r *http.Request, v *projection.View, s projection.Scan, limit int) ([]rawEntry, bool, error) {
	entries, err := v.Range(a.cfg.Instance, s)
	if err != nil {
		return nil, false, err
	}
	out := []rawEntry{}
	for e, err := range entries {
		if err != nil {
			return nil, false, err
		}
		if len(out) == limit {
			return out, true, nil
		}
		out = append(out, rawEntry{Key: e.Key, Value: e.Value, Raw: e.RawKey()})
		if err := r.Context().Err(); err != nil {
			return nil, false, err
		}
	}
	return out, false, nil
}

// members is what a gathered scan needs of the instance: *engine.App.
type members interface {
	Instances() []engine.Instance
}

// peers are the other instances of the group, which hold the partitions
// this one does not.
func (a *api) peers() ([]engine.Instance, error) {
	m, ok := a.cfg.Instance.(members)
	if !ok {
		return nil, nil
	}
	var out []engine.Instance
	for _, in := range m.Instances() {
		if in.ID == a.cfg.Instance.ID() {
			continue
		}
		if in.Addr == "" {
			return nil, fmt.Errorf("instance %s holds partitions of the view but advertises no HTTP address (engine.Config.AdvertisedAddr)", in.ID)
		}
		out = append(out, in)
	}
	return out, nil
}

// peerPage asks a peer for its page of the scan.
func (a *api) peerPage(r *http.Request, p engine.Instance) (localPage, error) {
	req, err := a.peerRequest(r, p.Addr, scanLocalHeader)
	if err != nil {
		return localPage{}, err
	}
	resp, err := a.cfg.Client.Do(req)
	if err != nil {
		return localPage{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return localPage{}, fmt.Errorf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	var page localPage
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		return localPage{}, err
	}
	return page, nil
}

// A cursor is the view's name and the last key of a page, opaque to
// clients: base64url of "<view>\x00<key bytes>".
func encodeCursor(view string, key []byte) string {
	return base64.RawURLEncoding.EncodeToString(append(append([]byte(view), 0), key...))
}

func decodeCursor(view, c string) ([]byte, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return nil, errors.New("the cursor is not one this API made")
	}
	if len(b) <= len(view) || string(b[:len(view)]) != view || b[len(view)] != 0 {
		return nil, fmt.Errorf("the cursor is not one of view %s", view)
	}
	return b[len(view)+1:], nil
}
