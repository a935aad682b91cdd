package httpapi

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine"
)

// healthz: the process is alive, unless its instance failed (Run returned
// an error: the instance processes nothing more, and a supervisor should
// restart it).
func (a *api) healthz(w http.ResponseWriter, r *http.Request) {
	if st := a.cfg.Instance.State(); st == engine.AppFailed {
		a.problem(w, r, http.StatusServiceUnavailable, "failed", "the instance failed and processes nothing more: restart it")
		return
	}
	// Alive, and a restart would not help with what is wrong (Kafka's
	// troubles): 200, saying what it is.
	if ps := a.problems(); len(ps) > 0 {
		a.json(w, http.StatusOK, map[string]any{"status": "ok", "problems": ps})
		return
	}
	a.json(w, http.StatusOK, map[string]string{"status": "ok"})
}

// problems lists what keeps the applications of the process from making
// progress though none has failed: the instance's and the deciders'
// Stalled, Degraded (with its Trouble) and Stuck.
func (a *api) problems() []string {
	var out []string
	say := func(who string, app any) {
		if s, ok := app.(interface{ Stalled() error }); ok && s.Stalled() != nil {
			out = append(out, fmt.Sprintf("%s: %v", who, s.Stalled()))
		}
		if s, ok := app.(interface{ State() engine.AppState }); ok && s.State() == engine.AppDegraded {
			msg := fmt.Sprintf("%s: degraded: Kafka does not answer; it retries", who)
			if tr, ok := app.(interface{ Trouble() error }); ok && tr.Trouble() != nil {
				msg += ": " + tr.Trouble().Error()
			}
			out = append(out, msg)
		}
		if s, ok := app.(interface{ Stuck() error }); ok && s.Stuck() != nil {
			out = append(out, fmt.Sprintf("%s: %v", who, s.Stuck()))
		}
	}
	say("the views' instance", a.cfg.Instance)
	for _, name := range slices.Sorted(maps.Keys(a.cfg.Deciders)) {
		say(fmt.Sprintf("the %s commands' decider", name), a.cfg.Deciders[name])
	}
	return out
}

// readyz: ready while the instance runs (not while it starts, restores
// state, rebalances or stops), and not while it is stalled (a transaction
// Kafka left open on its partitions, engine.App.Stalled).
func (a *api) readyz(w http.ResponseWriter, r *http.Request) {
	if s, ok := a.cfg.Instance.(interface{ Stalled() error }); ok {
		if err := s.Stalled(); err != nil {
			w.Header().Set("Retry-After", "10")
			a.problem(w, r, http.StatusServiceUnavailable, "stalled", err.Error())
			return
		}
	}
	for _, name := range slices.Sorted(maps.Keys(a.cfg.Deciders)) {
		d := a.cfg.Deciders[name]
		detail := ""
		switch st := d.State(); {
		case d.Stalled() != nil:
			detail = d.Stalled().Error()
		case st == engine.AppDegraded || st == engine.AppFailed:
			detail = fmt.Sprintf("it is %s", st)
			if tr, ok := d.(interface{ Trouble() error }); ok && tr.Trouble() != nil {
				detail += ": " + tr.Trouble().Error()
			}
		default:
			continue
		}
		w.Header().Set("Retry-After", "10")
		a.problem(w, r, http.StatusServiceUnavailable, "decider not deciding", fmt.Sprintf("the %s commands' decider: %s", name, detail))
		return
	}
	st := a.cfg.Instance.State()
	if st == engine.AppDegraded {
		w.Header().Set("Retry-After", "1")
		detail := "Kafka does not answer; the instance retries"
		if tr, ok := a.cfg.Instance.(interface{ Trouble() error }); ok && tr.Trouble() != nil {
			detail += ": " + tr.Trouble().Error()
		}
		a.problem(w, r, http.StatusServiceUnavailable, "degraded", detail)
		return
	}
	if st != engine.AppRunning {
		w.Header().Set("Retry-After", "1")
		detail := fmt.Sprintf("the instance is %s", st)
		if s, ok := a.cfg.Instance.(interface{ Stuck() error }); ok && s.Stuck() != nil {
			detail += ": " + s.Stuck().Error()
		}
		a.problem(w, r, http.StatusServiceUnavailable, "not ready", detail)
		return
	}
	a.json(w, http.StatusOK, map[string]string{"status": "ready"})
}

// reporter is what the status endpoint reads of an instance beyond
// Instance: *engine.App.
type reporter interface {
	Tasks() []string
	StandbyLag() map[string]int64
	RestoredRecords() int64
	Skipped() map[string]int64
	NodeRecords() map[string]int64
	Restoring() []engine.RestoreProgress
	DeadLetterTopic() string
}

// Status is the answer of GET /status.
type Status struct {
	Instance string                     `json:"instance"`
	State    string                     `json:"state"`
	Version  string                     `json:"version,omitempty"`
	Tasks    []string                   `json:"tasks"`
	Standby  map[string]int64           `json:"standbyLag,omitempty"` // standby task → changelog records behind
	Restored int64                      `json:"restoredRecords"`
	Skipped  map[string]int64           `json:"skipped,omitempty"`
	Position map[string]map[int32]int64 `json:"positions"`
	// Lag is, per input partition the instance processes, how many records
	// it is behind the partition's end (with Config.Brokers).
	Lag map[string]map[int32]int64 `json:"lag,omitempty"`
	// Workers is the number of goroutines processing the instance's tasks.
	Workers int `json:"workers,omitempty"`
	// Tags are the instance's client tags (its rack, zone, …).
	Tags map[string]string `json:"tags,omitempty"`
	// Assignment is where every task of the group runs, and why each
	// standby sits where it does.
	Assignment []TaskStatus `json:"assignment,omitempty"`
	// Instances are the group's members, as the last rebalance saw them.
	Instances []InstanceStatus `json:"instances,omitempty"`
	// Nodes counts, per node of the topology, the records that reached it
	// on this instance (engine.App.NodeRecords): two readings give each
	// node's rate.
	Nodes map[string]int64 `json:"nodes,omitempty"`
	// Restoring is every store of the instance's tasks being restored.
	Restoring []engine.RestoreProgress `json:"restoring,omitempty"`
	// DeadLetterTopic is where the instance dead-letters records, if it
	// does (GET /deadletters reads it).
	DeadLetterTopic string `json:"deadLetterTopic,omitempty"`
	// Stalled says why the instance cannot make progress: a transaction
	// Kafka left open on its partitions (engine.App.Stalled).
	Stalled string `json:"stalled,omitempty"`
	// Deciders are the applications of this process deciding the
	// commands the API takes (Config.Deciders), by aggregate.
	Deciders []DeciderStatus `json:"deciders,omitempty"`
}

// DeciderStatus is, in Status, an application deciding an aggregate's
// commands: its state, what stops it, and how far it is behind the
// commands (with *engine.App; another Decider says its state only).
type DeciderStatus struct {
	Aggregate string `json:"aggregate"`
	Group     string `json:"group,omitempty"`
	State     string `json:"state"`
	Stalled   string `json:"stalled,omitempty"`
	// Tasks are the decider's tasks on this instance; Position and Lag as
	// in Status, per input partition.
	Tasks    []string                   `json:"tasks,omitempty"`
	Position map[string]map[int32]int64 `json:"positions,omitempty"`
	Lag      map[string]map[int32]int64 `json:"lag,omitempty"`
}

// InstanceStatus is one member of the group in Status.
type InstanceStatus struct {
	ID   string            `json:"id"`
	Addr string            `json:"addr,omitempty"` // its HTTP address (engine.Config.AdvertisedAddr)
	Tags map[string]string `json:"tags,omitempty"`
}

// TaskStatus is one task's placement in Status.
type TaskStatus struct {
	Task     string   `json:"task"`
	Active   string   `json:"active"`             // instance id
	Standbys []string `json:"standbys,omitempty"` // instance ids
	Why      string   `json:"why,omitempty"`      // the standbys' placement, by the instances' tags
}

// placer is what the status endpoint reads of the group's placement:
// *engine.App.
type placer interface {
	Workers() int
	Instances() []engine.Instance
	Assignment() []engine.TaskPlacement
}

// status answers the instance's status, or with ?instance= another
// member's, asked of it.
func (a *api) status(w http.ResponseWriter, r *http.Request) {
	in := a.cfg.Instance
	if !a.onlyInstanceParam(w, r, "/status") {
		return
	}
	if id := r.URL.Query().Get("instance"); id != "" && id != in.ID() {
		a.statusOf(w, r, id)
		return
	}
	st := Status{Instance: in.ID(), State: in.State().String(), Version: a.cfg.Version, Tasks: []string{}, Position: in.Positions()}
	if rep, ok := in.(reporter); ok {
		if ts := rep.Tasks(); ts != nil {
			st.Tasks = ts
		}
		st.Standby, st.Restored, st.Skipped = rep.StandbyLag(), rep.RestoredRecords(), rep.Skipped()
		st.Nodes, st.Restoring, st.DeadLetterTopic = rep.NodeRecords(), rep.Restoring(), rep.DeadLetterTopic()
	}
	if s, ok := in.(interface{ Stalled() error }); ok {
		if err := s.Stalled(); err != nil {
			st.Stalled = err.Error()
		}
	}
	if pl, ok := in.(placer); ok {
		st.Workers = pl.Workers()
		for _, m := range pl.Instances() {
			if m.ID == st.Instance {
				st.Tags = m.Tags
			}
			st.Instances = append(st.Instances, InstanceStatus{ID: m.ID, Addr: m.Addr, Tags: m.Tags})
		}
		for _, p := range pl.Assignment() {
			ts := TaskStatus{Task: p.Task, Active: p.Active.ID, Why: p.Why}
			for _, s := range p.Standbys {
				ts.Standbys = append(ts.Standbys, s.ID)
			}
			st.Assignment = append(st.Assignment, ts)
		}
	}
	if len(a.cfg.Brokers) > 0 && len(st.Position) > 0 {
		st.Lag = a.lag(r.Context(), st.Position)
	}
	for _, name := range slices.Sorted(maps.Keys(a.cfg.Deciders)) {
		st.Deciders = append(st.Deciders, a.deciderStatus(r, name, a.cfg.Deciders[name]))
	}
	a.json(w, http.StatusOK, st)
}

// deciderStatus is what /status says of the decider of name's commands.
func (a *api) deciderStatus(r *http.Request, name string, d Decider) DeciderStatus {
	ds := DeciderStatus{Aggregate: name, State: d.State().String()}
	if err := d.Stalled(); err != nil {
		ds.Stalled = err.Error()
	}
	if g, ok := d.(interface{ Group() string }); ok {
		ds.Group = g.Group()
	}
	if t, ok := d.(interface{ Tasks() []string }); ok {
		ds.Tasks = t.Tasks()
	}
	if p, ok := d.(interface {
		Positions() map[string]map[int32]int64
	}); ok {
		ds.Position = p.Positions()
	}
	if len(a.cfg.Brokers) > 0 && len(ds.Position) > 0 {
		ds.Lag = a.lag(r.Context(), ds.Position)
	}
	return ds
}

// onlyInstanceParam refuses a request to route with a parameter other
// than ?instance=, saying so.
func (a *api) onlyInstanceParam(w http.ResponseWriter, r *http.Request, route string) bool {
	for k := range r.URL.Query() {
		if k != "instance" {
			a.problem(w, r, http.StatusBadRequest, "bad parameter", fmt.Sprintf("%q is not a parameter of %s (instance is)", k, route))
			return false
		}
	}
	return true
}

// statusOf answers the status of the group's member id, asked of it
// (another route asked of it likewise: the request is forwarded as is).
func (a *api) statusOf(w http.ResponseWriter, r *http.Request, id string) {
	pl, ok := a.cfg.Instance.(placer)
	if ok {
		for _, m := range pl.Instances() {
			if m.ID != id {
				continue
			}
			if m.Addr == "" {
				a.problem(w, r, http.StatusServiceUnavailable, "instance unreachable", fmt.Sprintf("instance %s advertises no HTTP address (engine.Config.AdvertisedAddr)", id))
				return
			}
			a.forward(w, r, &engine.NotLocalError{Owner: m})
			return
		}
	}
	a.problem(w, r, http.StatusNotFound, "no such instance", fmt.Sprintf("%q is not a member of this instance's group as it last saw it", id))
}

// lag is how far behind each partition's end the positions are (nil if
// the broker does not answer).
func (a *api) lag(ctx context.Context, pos map[string]map[int32]int64) map[string]map[int32]int64 {
	adm, err := a.admin()
	if err != nil {
		return nil
	}
	var topics []string
	for t := range pos {
		topics = append(topics, t)
	}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil
	}
	out := map[string]map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		at, ok := pos[o.Topic][o.Partition]
		if !ok || o.Err != nil {
			return
		}
		if out[o.Topic] == nil {
			out[o.Topic] = map[int32]int64{}
		}
		out[o.Topic][o.Partition] = max(o.Offset-at, 0)
	})
	return out
}

// admin is the API's Kafka admin client, made on first use.
func (a *api) admin() (*kadm.Client, error) {
	a.admMu.Lock()
	defer a.admMu.Unlock()
	if a.adm == nil {
		cl, err := kgo.NewClient(a.kopts...)
		if err != nil {
			return nil, err
		}
		a.adm = kadm.NewClient(cl)
	}
	return a.adm, nil
}

// topology answers the topology's description, as Describe prints it, or
// as JSON (engine.TopologyGraph) when the request accepts
// application/json or says ?format=json, with the instance's real names of
// its internal topics (its group's prefix for "${app}-").
func (a *api) topology(w http.ResponseWriter, r *http.Request) {
	if a.cfg.Topology == nil {
		a.problem(w, r, http.StatusNotFound, "no topology", "this API was given no topology (Config.Topology)")
		return
	}
	prefix := "${app}-"
	if g, ok := a.cfg.Instance.(interface{ Group() string }); ok {
		prefix = g.Group() + "-"
	}
	if r.URL.Query().Get("format") == "json" || wantsJSON(r) {
		g := a.cfg.Topology.Graph()
		named := func(s *string) { *s = strings.Replace(*s, "${app}-", prefix, 1) }
		for _, sub := range g.SubTopologies {
			for i := range sub.Nodes {
				named(&sub.Nodes[i].Topic)
			}
		}
		for i := range g.Stores {
			named(&g.Stores[i].Changelog)
		}
		for i := range g.InternalTopics {
			named(&g.InternalTopics[i].Name)
		}
		a.json(w, http.StatusOK, g)
		return
	}
	desc := strings.ReplaceAll(a.cfg.Topology.Describe(), "${app}-", prefix)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte(desc))
}

// standby is the instance read with stale answers allowed: the partitions
// it keeps as standby replicas too, at most maxLag records behind.
type standby struct {
	Instance
	maxLag int64
}

func (s standby) LocalStore(name string) (engine.RawStore, error) {
	if st, ok := s.Instance.(interface {
		StandbyStore(name string, maxLag int64) (engine.RawStore, error)
	}); ok {
		return st.StandbyStore(name, s.maxLag)
	}
	return s.Instance.LocalStore(name)
}

// readFrom is the instance as the request may read it: with ?maxLag=N,
// standby replicas at most N records behind answer too.
func (a *api) readFrom(w http.ResponseWriter, r *http.Request) (Instance, bool) {
	s := r.URL.Query().Get("maxLag")
	if s == "" {
		return a.cfg.Instance, true
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		a.problem(w, r, http.StatusBadRequest, "bad maxLag", fmt.Sprintf("maxLag %q: want a number of records, 0 or more", s))
		return nil, false
	}
	return standby{a.cfg.Instance, n}, true
}

// wantsJSON: the request accepts JSON.
func wantsJSON(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "application/json")
}
