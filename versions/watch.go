package versions

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Watcher follows the control topic: which version of each application
// is active, updated as promotions are written. Make one with
// Control.Watcher, run it (Run), and ask it (Active).
type Watcher struct {
	c       *Control
	mu      sync.RWMutex
	apps    map[string]*App
	ready   chan struct{}
	once    sync.Once
	changed []func(app, active string)
}

// Watcher makes a Watcher; it knows nothing before Run has read the
// control topic up to its end (Ready).
func (c *Control) Watcher() *Watcher {
	return &Watcher{c: c, apps: map[string]*App{}, ready: make(chan struct{})}
}

// OnChange registers fn, called (from Run's goroutine) whenever an
// application's active version changes. Call it before Run.
func (w *Watcher) OnChange(fn func(app, active string)) { w.changed = append(w.changed, fn) }

// Ready is closed once the watcher has read the control topic to the end
// it had when Run started.
func (w *Watcher) Ready() <-chan struct{} { return w.ready }

// Active is the application's active version, "" if none was promoted.
func (w *Watcher) Active(app string) string {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if a := w.apps[app]; a != nil {
		return a.Active
	}
	return ""
}

// App is what the watcher knows of an application (a copy).
func (w *Watcher) App(app string) App {
	w.mu.RLock()
	defer w.mu.RUnlock()
	a := w.apps[app]
	if a == nil {
		return App{App: app, Versions: map[string]Version{}}
	}
	cp := *a
	cp.Versions = make(map[string]Version, len(a.Versions))
	for k, v := range a.Versions {
		cp.Versions[k] = v
	}
	return cp
}

// Run reads the control topic from its start and follows it until ctx is
// done; it returns nil then, or the error that stopped it.
func (w *Watcher) Run(ctx context.Context) error {
	if err := w.c.ensureTopic(ctx); err != nil {
		return err
	}
	ends, err := w.c.adm.ListEndOffsets(ctx, w.c.topic)
	if err != nil {
		return fmt.Errorf("versions: the end of %s: %w", w.c.topic, err)
	}
	end := int64(0)
	if e, ok := ends.Lookup(w.c.topic, 0); ok && e.Err == nil {
		end = e.Offset
	}
	if end == 0 {
		w.once.Do(func() { close(w.ready) })
	}
	cl, err := kgo.NewClient(append(slices.Clone(w.c.opts),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{w.c.topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchMaxWait(500*time.Millisecond))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		for _, fe := range fs.Errors() {
			return fmt.Errorf("versions: reading %s: %w", w.c.topic, fe.Err)
		}
		var changes [][2]string
		w.mu.Lock()
		fs.EachRecord(func(r *kgo.Record) {
			before := map[string]string{}
			get := func(name string) *App {
				a := w.apps[name]
				if a == nil {
					a = &App{App: name, Versions: map[string]Version{}}
					w.apps[name] = a
				}
				if _, ok := before[name]; !ok {
					before[name] = a.Active
				}
				return a
			}
			applyRecord(r, get)
			for name, was := range before {
				if now := w.apps[name].Active; now != was {
					changes = append(changes, [2]string{name, now})
				}
			}
			if r.Offset >= end-1 {
				w.once.Do(func() { close(w.ready) })
			}
		})
		w.mu.Unlock()
		for _, c := range changes {
			for _, fn := range w.changed {
				fn(c[0], c[1])
			}
		}
	}
}
