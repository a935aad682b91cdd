package runtime

import (
	"context"
	"fmt"
	"runtime/debug"
)

// PanicError is a panic in user code (a processor, a punctuator, a
// serde), recovered by the engine. Recovered while a record was processed,
// it goes through the processing error policy like any error the record
// caused: skipped, dead-lettered (the panic's value in the error header)
// or failing the instance. The goroutine that ran it carries on with the
// next record; nothing of the panicking call's partial work is undone
// except as a failed transaction undoes it (exactly-once, fail policy).
type PanicError struct {
	Value any    // what was passed to panic
	Stack []byte // the panicking goroutine's stack
}

func newPanicError(p any) *PanicError {
	return &PanicError{Value: p, Stack: debug.Stack()}
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// Unwrap gives the panic's value if it is an error (panic(err)).
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// guard runs fn, user code in it, turning a panic into a *PanicError
// (wrapped in "engine: <what>: "), logged with its stack and counted. It
// is for the user code that runs outside a record's processing: a
// processor's Init and Close as a task opens and closes, a global table's
// serdes, the whole of a worker's turn with a task.
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
	r.log.Error("user code panicked", "in", where, "panic", fmt.Sprint(p), "stack", string(pe.Stack))
	r.m.panicked(context.Background())
	return pe
}
