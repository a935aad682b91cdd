package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// The error policies: what becomes of a record that cannot be decoded,
// processed or produced (OnDecodeError, OnProcessError, OnProduceError),
// and the dead letters the DeadLetter policy writes.

// decodeError marks an error the decode hook already handled.
type decodeError struct{ err error }

func (e *decodeError) Error() string { return e.err.Error() }

// recordsFault says whether an error may be charged to the record that met
// it (skipped or dead-lettered by a policy): not when a serde could not
// reach what it needs (serde.ErrUnavailable).
func recordsFault(err error) bool { return !errors.Is(err, serde.ErrUnavailable) }

func (t *rtask) onDecodeError(in topo.Input, err error) error {
	r := t.r
	if !recordsFault(err) {
		return &decodeError{err}
	}
	switch r.cfg.OnDecodeError {
	case Skip:
		r.log.Warn("skipped a record that cannot be decoded", "topic", in.Topic, "partition", in.Partition, "offset", in.Offset, "err", err)
		r.m.dropped(context.Background(), "decode")
		return nil
	case DeadLetter:
		r.m.dropped(context.Background(), "decode")
		return t.deadLetter(in.Topic, in.Partition, in.Offset, in.Key, in.Value, in.Timestamp, in.Headers, "decode", err)
	}
	return &decodeError{err}
}

func (t *rtask) handleProcessError(ctx context.Context, rec *kgo.Record, err error) error {
	r := t.r
	where := []any{"task", t.id.String(), "err", err}
	if rec != nil {
		where = append(where, "topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset)
	}
	policy := r.cfg.OnProcessError
	if !recordsFault(err) {
		policy = Fail
	}
	switch policy {
	case Skip:
		r.log.Warn("skipped a record whose processing failed", where...)
		r.m.dropped(ctx, "process")
		return nil
	case DeadLetter:
		r.m.dropped(ctx, "process")
		if rec == nil {
			return fmt.Errorf("engine: task %s: punctuation: %w", t.id, err)
		}
		return t.deadLetter(rec.Topic, rec.Partition, rec.Offset, rec.Key, rec.Value, rec.Timestamp.UnixMilli(), nil, "process", err)
	}
	if rec != nil {
		return fmt.Errorf("engine: task %s: %s[%d]@%d: %w", t.id, rec.Topic, rec.Partition, rec.Offset, err)
	}
	return fmt.Errorf("engine: task %s: %w", t.id, err)
}

func (t *rtask) deadLetter(topic string, partition int32, offset int64, key, value []byte, ts int64, headers []topo.Header, stage string, err error) error {
	hs := append(slices.Clone(headers),
		topo.Header{Key: HeaderError, Value: []byte(err.Error())},
		topo.Header{Key: HeaderTopic, Value: []byte(topic)},
		topo.Header{Key: HeaderPartition, Value: []byte(strconv.Itoa(int(partition)))},
		topo.Header{Key: HeaderOffset, Value: []byte(strconv.FormatInt(offset, 10))},
		topo.Header{Key: HeaderStage, Value: []byte(stage)},
	)
	t.r.log.Warn("dead-lettered a record", "topic", topic, "partition", partition, "offset", offset, "stage", stage, "err", err)
	return t.out.Send(topo.Output{Topic: t.r.cfg.DeadLetterTopic, Partition: 0, Key: key, Value: value, Timestamp: ts, Headers: hs})
}
