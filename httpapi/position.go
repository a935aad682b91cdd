package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/projection"
)

// storePositioner is an Instance that tells what each store reflects
// (*engine.App, enginetest's driver); without it a read waits for the
// instance's input positions, which a store behind a repartition topic
// reflects later.
type storePositioner interface {
	StorePosition(store string) (engine.StorePosition, error)
}

// awaitPositions waits until the view's store reflects every position of
// the request's ?minPosition=<topic>:<partition>:<offset> (repeatable: the
// positions of a command's events, say), through every repartition topic
// between; false: it answered why not.
func (a *api) awaitPositions(w http.ResponseWriter, r *http.Request, v *projection.View) bool {
	return a.awaitPositionsOf(w, r, v, false)
}

// awaitPositionsOf is awaitPositions; heldOnly: positions only the owner
// of a partition of the view reflects are another's to wait for (a
// gathered scan asks every instance).
func (a *api) awaitPositionsOf(w http.ResponseWriter, r *http.Request, v *projection.View, heldOnly bool) bool {
	specs := r.URL.Query()["minPosition"]
	if len(specs) == 0 {
		return true
	}
	type position struct {
		topic     string
		partition int32
		offset    int64
	}
	var want []position
	for _, spec := range specs {
		i := strings.LastIndexByte(spec, ':')
		j := -1
		if i > 0 {
			j = strings.LastIndexByte(spec[:i], ':')
		}
		var p position
		var err1, err2 error
		var part int64
		if j > 0 {
			p.topic = spec[:j]
			part, err1 = strconv.ParseInt(spec[j+1:i], 10, 32)
			p.offset, err2 = strconv.ParseInt(spec[i+1:], 10, 64)
		}
		if j <= 0 || err1 != nil || err2 != nil || part < 0 || p.offset < 0 {
			a.problem(w, r, http.StatusBadRequest, "bad position", fmt.Sprintf("minPosition %q: want <topic>:<partition>:<offset>", spec))
			return false
		}
		p.partition = int32(part)
		want = append(want, p)
	}
	sp, byStore := a.cfg.Instance.(storePositioner)
	// have is what the view reflects, and whether a missing position is
	// another instance's to wait for (heldOnly).
	have := func() (map[string]map[int32]int64, func(topic string) bool, error) {
		if !byStore {
			return a.cfg.Instance.Positions(), func(string) bool { return heldOnly }, nil
		}
		pos, err := sp.StorePosition(v.Store())
		if err != nil {
			return nil, nil, err
		}
		elsewhere := func(topic string) bool {
			return heldOnly && (len(pos.Partitions) == 0 || !slices.Contains(pos.Derived, topic))
		}
		return pos.Offsets, elsewhere, nil
	}
	if byStore {
		pos, err := sp.StorePosition(v.Store())
		if err != nil {
			a.problem(w, r, http.StatusServiceUnavailable, "position unknown", err.Error())
			return false
		}
		for _, p := range want {
			if !slices.Contains(pos.Inputs, p.topic) {
				a.problem(w, r, http.StatusBadRequest, "bad position", fmt.Sprintf("minPosition %s:%d:%d: view %s does not derive from topic %s, so no position of it can be waited for (it derives from %s)", p.topic, p.partition, p.offset, v.Name(), p.topic, topicList(pos.Inputs)))
				return false
			}
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.cfg.PositionWait)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		at, elsewhere, err := have()
		if err != nil {
			a.problem(w, r, http.StatusServiceUnavailable, "position unknown", err.Error())
			return false
		}
		var missing []string
		for _, p := range want {
			o, ok := at[p.topic][p.partition]
			if !ok && elsewhere(p.topic) {
				continue
			}
			if !ok || o <= p.offset {
				missing = append(missing, fmt.Sprintf("%s:%d:%d (at %s)", p.topic, p.partition, p.offset, positionText(o, ok)))
			}
		}
		if len(missing) == 0 {
			return true
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			w.Header().Set("Retry-After", "1")
			a.problem(w, r, http.StatusServiceUnavailable, "position not reached", fmt.Sprintf("after %v view %s does not reflect %s yet", a.cfg.PositionWait, v.Name(), strings.Join(missing, ", ")))
			return false
		}
	}
}

func topicList(topics []string) string {
	if len(topics) == 0 {
		return "no topic"
	}
	return strings.Join(topics, ", ")
}

func positionText(at int64, ok bool) string {
	if !ok {
		return "nothing known of it here yet"
	}
	return strconv.FormatInt(at, 10)
}
