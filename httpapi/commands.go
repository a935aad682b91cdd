package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/oxbow-dev/oxbow/aggregate"
)

// Submitter submits a command in its JSON envelope and waits for its
// outcome: *aggregate.Client.
type Submitter interface {
	SubmitJSON(ctx context.Context, aggregateID string, envelope []byte, opts ...aggregate.SubmitOption) (aggregate.Outcome, error)
}

// command submits a command to an aggregate and answers its outcome: 200
// accepted, 409 conflict, 422 rejected, each with the outcome as JSON and
// the aggregate's version as the ETag. The body is the command's envelope,
// {"type":…,"data":…}; Idempotency-Key is its command id, If-Match the
// version it expects.
func (a *api) command(w http.ResponseWriter, r *http.Request) {
	name, _ := url.PathUnescape(chi.URLParam(r, "aggregate"))
	sub, ok := a.cfg.Commands[name]
	if !ok {
		a.problem(w, r, http.StatusNotFound, "no such aggregate", fmt.Sprintf("there is no aggregate %q that takes commands here", name))
		return
	}
	id, err := url.PathUnescape(chi.URLParam(r, "id"))
	if err != nil || id == "" {
		a.problem(w, r, http.StatusBadRequest, "bad aggregate id", "the aggregate id is empty or badly escaped")
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		a.problem(w, r, http.StatusUnsupportedMediaType, "unsupported media type", fmt.Sprintf("a command is application/json, not %s", ct))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, a.cfg.MaxBodyBytes))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		a.problem(w, r, http.StatusRequestEntityTooLarge, "body too large", fmt.Sprintf("a command's body is at most %d bytes", a.cfg.MaxBodyBytes))
		return
	case err != nil:
		a.problem(w, r, http.StatusBadRequest, "unreadable body", err.Error())
		return
	case !json.Valid(body):
		a.problem(w, r, http.StatusBadRequest, "malformed JSON", `the body is not JSON: send the command's envelope, {"type":"<command>","data":{…}}`)
		return
	}
	var opts []aggregate.SubmitOption
	if key := r.Header.Get("Idempotency-Key"); key != "" {
		opts = append(opts, aggregate.CommandID(key))
	}
	if m := r.Header.Get("If-Match"); m != "" {
		v, err := strconv.ParseInt(strings.Trim(strings.TrimPrefix(m, "W/"), `"`), 10, 64)
		if err != nil || v < 0 {
			a.problem(w, r, http.StatusBadRequest, "bad If-Match", fmt.Sprintf("If-Match %q: want the aggregate's version, a number", m))
			return
		}
		opts = append(opts, aggregate.ExpectedVersion(v))
	}
	if c := r.Header.Get("Oxbow-Correlation-Id"); c != "" {
		opts = append(opts, aggregate.CorrelationID(c))
	}
	if d, ok := a.cfg.Deciders[name]; ok {
		if err := d.Stalled(); err != nil {
			w.Header().Set("Retry-After", "10")
			a.problem(w, r, http.StatusServiceUnavailable, "decider stalled", fmt.Sprintf("the %s commands' decider cannot decide: %v; retry with the same Idempotency-Key", name, err))
			return
		}
	}
	start := time.Now()
	o, err := sub.SubmitJSON(r.Context(), id, body, opts...)
	outcome := string(o.Status)
	switch {
	case errors.Is(err, aggregate.ErrMalformedCommand):
		outcome = "malformed"
	case errors.Is(err, aggregate.ErrCommandIDReused):
		outcome = "reused-key"
	case errors.Is(err, aggregate.ErrNoOutcome), errors.Is(err, context.DeadlineExceeded):
		outcome = "no-outcome"
	case err != nil:
		outcome = "failed"
	case o.Duplicate:
		outcome = "duplicate"
	}
	a.commandDone(r.Context(), name, outcome, start)
	switch {
	case errors.Is(err, aggregate.ErrMalformedCommand):
		// In the caller's terms: the envelope's and the command's fields.
		a.problem(w, r, http.StatusBadRequest, "malformed command", strings.ReplaceAll(err.Error(), "aggregate: ", ""))
		return
	case errors.Is(err, aggregate.ErrCommandIDReused):
		a.problem(w, r, http.StatusUnprocessableEntity, "Idempotency-Key reused", fmt.Sprintf("Idempotency-Key %q was first used for another request (another aggregate, body or If-Match); its outcome stands and this command was not run: send it with a key of its own", r.Header.Get("Idempotency-Key")))
		return
	case errors.Is(err, aggregate.ErrNoOutcome), errors.Is(err, context.DeadlineExceeded):
		a.problem(w, r, http.StatusGatewayTimeout, "no outcome", err.Error()+"; retry with the same Idempotency-Key")
		return
	case err != nil:
		a.cfg.Logger.Error("httpapi: a command failed", "aggregate", name, "id", id, "err", err)
		a.problem(w, r, http.StatusBadGateway, "command not submitted", err.Error())
		return
	}
	status := http.StatusOK
	switch o.Status {
	case aggregate.Conflict:
		status = http.StatusConflict
	case aggregate.Rejected:
		status = http.StatusUnprocessableEntity
	}
	w.Header().Set("ETag", fmt.Sprintf(`"%d"`, o.Version))
	a.json(w, status, o)
}
