package httpapi

import (
	"context"
	"net/http"
	"sync"
	"time"
)

// lagSampleEvery is how often an instance measures its lag for GET /lag.
const lagSampleEvery = 5 * time.Second

// LagSample is one measurement of an instance's input partitions: where it
// is (its positions) and how many records it is behind each one's end.
type LagSample struct {
	At       time.Time                  `json:"t"`
	Position map[string]map[int32]int64 `json:"positions"`
	Lag      map[string]map[int32]int64 `json:"lag"`
}

// LagHistory is the answer of GET /lag: the instance's lag measured every
// IntervalSeconds over the last Config.LagHistory, oldest first.
type LagHistory struct {
	Instance        string      `json:"instance"`
	IntervalSeconds float64     `json:"intervalSeconds"`
	Samples         []LagSample `json:"samples"`
}

// lagHistory holds the samples of the last window.
type lagHistory struct {
	window  time.Duration
	mu      sync.Mutex
	samples []LagSample // oldest first
}

// add appends s and drops the samples older than the window before it.
func (h *lagHistory) add(s LagSample) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.samples = append(h.samples, s)
	i := 0
	for i < len(h.samples) && s.At.Sub(h.samples[i].At) > h.window {
		i++
	}
	h.samples = append(h.samples[:0], h.samples[i:]...)
}

func (h *lagHistory) get() []LagSample {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]LagSample{}, h.samples...)
}

// sampleLag measures the instance's lag every lagSampleEvery until the
// handler closes. The handler owns it.
func (a *api) sampleLag() {
	defer a.sampling.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-a.done
		cancel()
	}()
	t := time.NewTicker(lagSampleEvery)
	defer t.Stop()
	for {
		select {
		case <-a.done:
			return
		case now := <-t.C:
			pos := a.cfg.Instance.Positions()
			if len(pos) == 0 {
				continue
			}
			mctx, mcancel := context.WithTimeout(ctx, lagSampleEvery)
			lag := a.lag(mctx, pos)
			mcancel()
			if lag != nil {
				a.history.add(LagSample{At: now.UTC(), Position: pos, Lag: lag})
			}
		}
	}
}

// lagHistory answers GET /lag, or another member's (?instance=).
func (a *api) lagHistory(w http.ResponseWriter, r *http.Request) {
	if !a.onlyInstanceParam(w, r, "/lag") {
		return
	}
	if id := r.URL.Query().Get("instance"); id != "" && id != a.cfg.Instance.ID() {
		a.statusOf(w, r, id)
		return
	}
	out := LagHistory{Instance: a.cfg.Instance.ID(), IntervalSeconds: lagSampleEvery.Seconds(), Samples: []LagSample{}}
	if a.history != nil {
		out.Samples = a.history.get()
	}
	a.json(w, http.StatusOK, out)
}
