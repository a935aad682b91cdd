package runtime

import (
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
