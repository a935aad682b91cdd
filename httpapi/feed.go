package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// changelogs is what a feed needs of the instance: *engine.App.
type changelogs interface {
	ChangelogTopic(store string) (string, error)
}

// Change is one event of a change feed: a key's new value, or its
// deletion.
type Change struct {
	Key     any  `json:"key"`
	Value   any  `json:"value,omitempty"`
	Deleted bool `json:"deleted,omitempty"`
}

// changes streams a view's changes as server-sent events, read from its
// store's changelog (every partition, read committed): "event: change",
// data a Change, and an id with the feed's position, which a client that
// reconnects gives back (Last-Event-ID, or ?from=) to resume after it.
// Without one the feed starts at the changelog's end. ?key= keeps one
// key's changes.
func (a *api) changes(w http.ResponseWriter, r *http.Request) {
	v, ok := a.view(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	for k := range q {
		if k != "key" && k != "from" {
			a.problem(w, r, http.StatusBadRequest, "bad parameter", fmt.Sprintf("%q is not a parameter of a change feed (key, from)", k))
			return
		}
	}
	var key []byte
	if q.Has("key") {
		var err error
		if key, err = v.EncodeKey(q.Get("key")); err != nil {
			a.problem(w, r, http.StatusBadRequest, "bad key", err.Error())
			return
		}
	}
	from := q.Get("from")
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		from = id
	}
	start, err := parseFeedPosition(from)
	if err != nil {
		a.problem(w, r, http.StatusBadRequest, "bad position", err.Error())
		return
	}
	cl, ok := a.cfg.Instance.(changelogs)
	if !ok || len(a.cfg.Brokers) == 0 {
		a.problem(w, r, http.StatusNotFound, "no change feeds", "this API serves no change feeds: they need Config.Brokers and an instance with changelogs (engine.App)")
		return
	}
	topic, err := cl.ChangelogTopic(v.Store())
	if err != nil {
		a.problem(w, r, http.StatusNotFound, "no change feed", err.Error())
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		a.problem(w, r, http.StatusInternalServerError, "no streaming", "the server cannot stream responses")
		return
	}
	select {
	case <-a.done:
		w.Header().Set("Retry-After", "1")
		a.problem(w, r, http.StatusServiceUnavailable, "shutting down", "the instance is shutting down")
		return
	default:
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-a.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	kcl, err := kgo.NewClient(append(slices.Clone(a.kopts), kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
	if err != nil {
		a.cfg.Logger.Error("httpapi: a change feed failed", "path", r.URL.Path, "err", err)
		a.problem(w, r, http.StatusInternalServerError, "feed failed", err.Error())
		return
	}
	defer kcl.Close()
	adm := kadm.NewClient(kcl)
	// listOffsets lists each partition's offset (its end, or its start).
	listOffsets := func(list func(context.Context, ...string) (kadm.ListedOffsets, error)) (map[int32]int64, bool) {
		listed, err := list(ctx, topic)
		if err == nil {
			err = listed.Error()
		}
		if err != nil {
			a.problem(w, r, http.StatusServiceUnavailable, "feed failed", fmt.Sprintf("the changelog %s: %v", topic, err))
			return nil, false
		}
		out := map[int32]int64{}
		listed.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
		return out, true
	}
	pos, ok := listOffsets(adm.ListEndOffsets)
	if !ok {
		return
	}
	if len(start) > 0 {
		first, ok := listOffsets(adm.ListStartOffsets)
		if !ok {
			return
		}
		if why := checkFeedStart(start, first, pos); why != "" {
			a.problem(w, r, http.StatusBadRequest, "bad position", fmt.Sprintf("position %s: %s; resume with a feed's last event id, or start afresh without one", formatFeedPosition(start), why))
			return
		}
		maps.Copy(pos, start)
	}
	offsets := map[int32]kgo.Offset{}
	for p, o := range pos {
		offsets[p] = kgo.NewOffset().At(o)
	}
	kcl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets})

	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, ": changes of view %s from %s\nid: %s\n\n", v.Name(), formatFeedPosition(pos), formatFeedPosition(pos))
	flusher.Flush()
	for {
		pctx, pcancel := context.WithTimeout(ctx, a.cfg.Heartbeat)
		fs := kcl.PollFetches(pctx)
		pcancel()
		if ctx.Err() != nil {
			return // the client went away, or Close
		}
		var fatal error
		fs.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				fatal = err
			}
		})
		if fatal != nil {
			fmt.Fprintf(w, "event: error\ndata: %s\n\n", strings.ReplaceAll(fatal.Error(), "\n", " "))
			flusher.Flush()
			return
		}
		n := 0
		fs.EachRecord(func(rec *kgo.Record) {
			pos[rec.Partition] = rec.Offset + 1
			if key != nil && !v.IsOf(rec.Key, key) {
				return
			}
			e, err := v.Decode(rec.Key, rec.Value)
			if err != nil {
				fmt.Fprintf(w, "event: error\ndata: %s\n\n", strings.ReplaceAll(err.Error(), "\n", " "))
				return
			}
			b, _ := json.Marshal(Change{Key: e.Key, Value: e.Value, Deleted: rec.Value == nil})
			fmt.Fprintf(w, "id: %s\nevent: change\ndata: %s\n\n", formatFeedPosition(pos), b)
			n++
		})
		if n == 0 {
			fmt.Fprint(w, ": keep-alive\n\n")
		}
		flusher.Flush()
	}
}

// A feed position is "<partition>:<offset>" for each partition of the
// changelog, comma-separated: where the feed goes on from.
func formatFeedPosition(pos map[int32]int64) string {
	var ps []int32
	for p := range pos {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d:%d", p, pos[p])
	}
	return b.String()
}

// checkFeedStart says what is wrong with a resume point (start) for a
// changelog whose partitions start at first and end at end: "" if it can
// be honoured with nothing lost. It must name every partition, and only
// those, each at an offset between its start and its end.
func checkFeedStart(start, first, end map[int32]int64) string {
	var why []string
	for _, p := range slices.Sorted(maps.Keys(start)) {
		o := start[p]
		e, ok := end[p]
		switch {
		case !ok:
			why = append(why, fmt.Sprintf("the changelog has no partition %d (it has %d)", p, len(end)))
		case o > e:
			why = append(why, fmt.Sprintf("partition %d: offset %d is past the changelog's end, %d", p, o, e))
		case o < first[p]:
			why = append(why, fmt.Sprintf("partition %d: offset %d is before the changelog's start, %d: the changes between are gone", p, o, first[p]))
		}
	}
	var missing []string
	for _, p := range slices.Sorted(maps.Keys(end)) {
		if _, ok := start[p]; !ok {
			missing = append(missing, strconv.Itoa(int(p)))
		}
	}
	if len(missing) > 0 {
		why = append(why, "it names no offset for partition "+strings.Join(missing, ", "))
	}
	return strings.Join(why, "; ")
}

func parseFeedPosition(s string) (map[int32]int64, error) {
	out := map[int32]int64{}
	if s == "" {
		return out, nil
	}
	if u, err := url.QueryUnescape(s); err == nil {
		s = u
	}
	for _, part := range strings.Split(s, ",") {
		ps, os, ok := strings.Cut(part, ":")
		p, err1 := strconv.ParseInt(ps, 10, 32)
		o, err2 := strconv.ParseInt(os, 10, 64)
		if !ok || err1 != nil || err2 != nil || p < 0 || o < 0 {
			return nil, fmt.Errorf("position %q: want <partition>:<offset>,… as a feed's event id gives it", s)
		}
		out[int32(p)] = o
	}
	return out, nil
}
