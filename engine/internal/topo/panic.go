package topo

import (
	"runtime/debug"

	"github.com/oxbow-dev/oxbow/engine/record"
)

// PanicError is a panic in user code (a processor, a punctuator, a
// serde), recovered by the engine. Recovered while a record was processed,
// it goes through the processing error policy like any error the record
// caused: skipped, dead-lettered (the panic's value in the error header)
// or failing the instance. The goroutine that ran it carries on with the
// next record; nothing of the panicking call's partial work is undone
// except as a failed transaction undoes it (exactly-once, fail policy).
type PanicError = record.PanicError

// NewPanicError is the error of a recovered panic, p, with the stack of
// the goroutine that recovers it (call it in the deferred function).
func NewPanicError(p any) *PanicError {
	return &PanicError{Value: p, Stack: debug.Stack()}
}

// safely calls fn, user code, a panic in it becoming a *PanicError: so
// that a processor whose Init or Close panics does not leave the others
// (and the task's stores) unclosed.
func safely(fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = NewPanicError(p)
		}
	}()
	return fn()
}
