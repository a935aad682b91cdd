package runtime

import (
	"context"
	"errors"
	"fmt"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
)

// PanicError is a panic in user code, recovered by the engine (see
// topo.PanicError).
type PanicError = topo.PanicError

func newPanicError(p any) *PanicError { return topo.NewPanicError(p) }

// guard runs fn, turning a panic in it into a *PanicError (wrapped in
// "engine: <what>: "), logged with its stack and counted: the whole of a
// worker's turn with a task, for the user code that runs there outside a
// record's processing (the record cache's flush forwarding downstream, a
// before-commit hook). The other places user code runs recover on their
// own: processFrom and punctuate (per record, for the processing error
// policy), topo.Task (a processor's Init and Close), collector.callProduced
// (a ForwardToProduced callback, on the client's goroutine),
// globalTask.apply (a global table's serdes).
func (r *Runtime) guard(what string, fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("engine: %s: %w", what, r.panicked(p, what))
		}
	}()
	return fn()
}

// panicked logs a recovered panic with its stack, counts it, and returns
// it as a *PanicError.
func (r *Runtime) panicked(p any, where string) *PanicError {
	pe := newPanicError(p)
	r.notePanic(pe, where)
	return pe
}

// notePanic logs a panic recovered as pe, with its stack, and counts it.
func (r *Runtime) notePanic(pe *PanicError, where string) {
	r.log.Error("user code panicked", "in", where, "panic", fmt.Sprint(pe.Value), "stack", string(pe.Stack))
	r.m.panicked(context.Background())
}

// noteIfPanic logs and counts the panic err carries, if any: one topo.Task
// recovered from a processor's Init or Close.
func (r *Runtime) noteIfPanic(err error, where string) {
	var pe *PanicError
	if errors.As(err, &pe) {
		r.notePanic(pe, where)
	}
}
