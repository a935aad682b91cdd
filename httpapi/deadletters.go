package httpapi

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
)

// DeadLetter is one record of the dead-letter topic in GET /deadletters.
type DeadLetter struct {
	Partition int32             `json:"partition"`
	Offset    int64             `json:"offset"`
	Timestamp time.Time         `json:"timestamp"`
	Key       string            `json:"key"`   // as text (Go's %q escapes of what is not UTF-8)
	Value     string            `json:"value"` // likewise
	Headers   map[string]string `json:"headers"`
}

// deadLetters answers the latest records of the instance's dead-letter
// topic (?limit=, default 20, at most MaxLimit), newest first (by offset;
// the engine creates the topic with one partition, else by partition): the
// record as it was read, and the headers that say where and why it failed.
func (a *api) deadLetters(w http.ResponseWriter, r *http.Request) {
	limit := 20
	for k, v := range r.URL.Query() {
		if k != "limit" {
			a.problem(w, r, http.StatusBadRequest, "bad parameter", fmt.Sprintf("%q is not a parameter of /deadletters (limit is)", k))
			return
		}
		n, err := strconv.Atoi(v[0])
		if err != nil || n < 1 || n > a.cfg.MaxLimit {
			a.problem(w, r, http.StatusBadRequest, "bad parameter", fmt.Sprintf("limit %q is not a number from 1 to %d", v[0], a.cfg.MaxLimit))
			return
		}
		limit = n
	}
	rep, ok := a.cfg.Instance.(reporter)
	topic := ""
	if ok {
		topic = rep.DeadLetterTopic()
	}
	if topic == "" || len(a.cfg.Brokers) == 0 {
		a.problem(w, r, http.StatusNotFound, "no dead letters", "the instance dead-letters nothing (engine.Config.DeadLetterTopic), or this API has no Brokers to read them with")
		return
	}
	out, err := a.readTail(r.Context(), topic, limit)
	if err != nil {
		a.problem(w, r, http.StatusBadGateway, "dead letters unreadable", fmt.Sprintf("reading %s: %v", topic, err))
		return
	}
	a.json(w, http.StatusOK, struct {
		Topic   string       `json:"topic"`
		Records []DeadLetter `json:"records"`
	}{topic, out})
}

// readTail reads up to n of the last committed records of every partition
// of topic, and answers n of them, by partition, newest first.
func (a *api) readTail(ctx context.Context, topic string, n int) ([]DeadLetter, error) {
	adm, err := a.admin()
	if err != nil {
		return nil, err
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	ends, err := adm.ListCommittedOffsets(ctx, topic) // the last stable offsets
	if err != nil {
		return nil, err
	}
	from := map[int32]kgo.Offset{}
	until := map[int32]int64{}
	for p, e := range ends[topic] {
		if e.Err != nil {
			return nil, e.Err
		}
		start := starts[topic][p].Offset
		if e.Offset <= start {
			continue
		}
		from[p] = kgo.NewOffset().At(max(start, e.Offset-int64(n)))
		until[p] = e.Offset
	}
	out := []DeadLetter{}
	if len(from) == 0 {
		return out, nil
	}
	cl, err := kgo.NewClient(append(a.kopts, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, a.cfg.RequestTimeout)
	defer cancel()
	for len(until) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("%d partitions not read to their end: %w", len(until), err)
		}
		if err := fs.Err(); err != nil {
			return nil, err
		}
		fs.EachRecord(func(rec *kgo.Record) {
			end, ok := until[rec.Partition]
			if !ok || rec.Offset >= end {
				return
			}
			// A transaction's marker (kept, so that the last offset
			// comes even when a marker takes it) is no dead letter.
			if !rec.Attrs.IsControl() {
				d := DeadLetter{Partition: rec.Partition, Offset: rec.Offset, Timestamp: rec.Timestamp.UTC(), Key: text(rec.Key), Value: text(rec.Value), Headers: map[string]string{}}
				for _, h := range rec.Headers {
					d.Headers[h.Key] = text(h.Value)
				}
				out = append(out, d)
			}
			if rec.Offset+1 >= end {
				delete(until, rec.Partition)
			}
		})
	}
	slices.SortFunc(out, func(a, b DeadLetter) int {
		return cmp.Or(cmp.Compare(a.Partition, b.Partition), cmp.Compare(b.Offset, a.Offset))
	})
	return out[:min(n, len(out))], nil
}

// text is b as text: itself if it is UTF-8, else Go's quoted form.
func text(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return strconv.Quote(string(b))
}
