package postgres

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pglogrepl"
)

// ackStep is one call on an acks tracker and what position and failed
// give after it.
type ackStep struct {
	op   string        // begin, add, ok, err, commit, idle, fail
	tx   int           // the transaction, by the order it was begun (from 0)
	lsn  pglogrepl.LSN // commit's end, idle's WAL end
	pos  pglogrepl.LSN // position() after the step
	fail bool          // failed() != nil after the step
}

func (s ackStep) String() string {
	switch s.op {
	case "commit":
		return fmt.Sprintf("commit(tx %d, end %d)", s.tx, s.lsn)
	case "idle":
		return fmt.Sprintf("idle(WAL end %d)", s.lsn)
	case "fail":
		return "fail"
	}
	return fmt.Sprintf("%s(tx %d)", s.op, s.tx)
}

// failed marks a step after which the tracker has failed.
func (s ackStep) failed() ackStep { s.fail = true; return s }

// TestAcks runs sequences of calls on a tracker. Each step is written as
// the call, its transaction and LSN if any, and the position after it;
// .failed() marks a step after which failed must report an error.
func TestAcks(t *testing.T) {
	begin := func(tx int, pos pglogrepl.LSN) ackStep { return ackStep{op: "begin", tx: tx, pos: pos} }
	add := func(tx int, pos pglogrepl.LSN) ackStep { return ackStep{op: "add", tx: tx, pos: pos} }
	ok := func(tx int, pos pglogrepl.LSN) ackStep { return ackStep{op: "ok", tx: tx, pos: pos} }
	errAck := func(tx int, pos pglogrepl.LSN) ackStep { return ackStep{op: "err", tx: tx, pos: pos, fail: true} }
	commit := func(tx int, end, pos pglogrepl.LSN) ackStep { return ackStep{op: "commit", tx: tx, lsn: end, pos: pos} }
	idle := func(walEnd, pos pglogrepl.LSN) ackStep { return ackStep{op: "idle", lsn: walEnd, pos: pos} }
	failAck := func(pos pglogrepl.LSN) ackStep { return ackStep{op: "fail", pos: pos, fail: true} }
	cases := []struct {
		name  string
		start pglogrepl.LSN
		steps []ackStep
	}{
		{"a transaction moves the position at its commit once acknowledged", 0, []ackStep{
			begin(0, 0), add(0, 0), add(0, 0), ok(0, 0), ok(0, 0),
			commit(0, 100, 100),
		}},
		{"a transaction committed before its acknowledgements waits for the last", 0, []ackStep{
			begin(0, 0), add(0, 0), add(0, 0), commit(0, 100, 0),
			ok(0, 0), ok(0, 100),
		}},
		{"acknowledged records do not move the position before the commit", 0, []ackStep{
			begin(0, 0), add(0, 0), ok(0, 0), add(0, 0), ok(0, 0),
			commit(0, 100, 100),
		}},
		{"a later transaction acknowledged first waits for the earlier", 50, []ackStep{
			begin(0, 50), add(0, 50), add(0, 50), commit(0, 100, 50),
			begin(1, 50), add(1, 50), commit(1, 200, 50),
			begin(2, 50), add(2, 50), commit(2, 300, 50),
			ok(2, 50), ok(1, 50), ok(0, 50),
			ok(0, 300),
		}},
		{"acknowledgements across transactions move the position step by step", 0, []ackStep{
			begin(0, 0), add(0, 0), commit(0, 100, 0),
			begin(1, 0), add(1, 0), add(1, 0), commit(1, 200, 0),
			begin(2, 0), add(2, 0), commit(2, 300, 0),
			ok(1, 0), ok(0, 100), ok(2, 100), ok(1, 300),
		}},
		{"a transaction with no records", 0, []ackStep{
			begin(0, 0), commit(0, 100, 100),
		}},
		{"a transaction with no records waits for the one before", 0, []ackStep{
			begin(0, 0), add(0, 0), commit(0, 100, 0),
			begin(1, 0), commit(1, 200, 0),
			ok(0, 200),
		}},
		{"a transaction that ended before the start does not move the position back", 1000, []ackStep{
			begin(0, 1000), commit(0, 900, 1000),
			begin(1, 1000), add(1, 1000), commit(1, 1100, 1000), ok(1, 1100),
		}},
		{"an error in a record holds the position and fails", 0, []ackStep{
			begin(0, 0), add(0, 0), add(0, 0), commit(0, 100, 0),
			ok(0, 0), errAck(0, 0),
			begin(1, 0).failed(), commit(1, 200, 0).failed(),
			idle(500, 0).failed(),
		}},
		{"an error in a later transaction holds what is acknowledged before", 0, []ackStep{
			begin(0, 0), add(0, 0), commit(0, 100, 0), ok(0, 100),
			begin(1, 100), add(1, 100), add(1, 100), commit(1, 200, 100),
			errAck(1, 100), ok(1, 100).failed(),
			begin(2, 100).failed(), add(2, 100).failed(), commit(2, 300, 100).failed(), ok(2, 100).failed(),
		}},
		{"an error holds even a transaction before it acknowledged later", 0, []ackStep{
			begin(0, 0), add(0, 0), commit(0, 100, 0),
			begin(1, 0), add(1, 0), commit(1, 200, 0),
			errAck(1, 0), ok(0, 0).failed(),
		}},
		{"a write outside the transactions fails and holds the position", 0, []ackStep{
			begin(0, 0), add(0, 0), commit(0, 100, 0),
			failAck(0), ok(0, 0).failed(), idle(500, 0).failed(),
		}},
		{"idle after a failed write does not move the position", 0, []ackStep{
			begin(0, 0), add(0, 0), ok(0, 0), commit(0, 100, 100),
			failAck(100), idle(500, 100).failed(),
			begin(1, 100).failed(), commit(1, 200, 100).failed(),
		}},
		{"idle while a transaction is open does not move the position", 0, []ackStep{
			begin(0, 0), idle(500, 0), add(0, 0), idle(500, 0), ok(0, 0), idle(500, 0),
			commit(0, 100, 100),
		}},
		{"idle while a transaction waits for Kafka does not move the position", 0, []ackStep{
			begin(0, 0), add(0, 0), commit(0, 100, 0),
			idle(500, 0),
			ok(0, 100),
		}},
		{"idle after all is acknowledged moves the position to the WAL end", 0, []ackStep{
			idle(50, 50),
			begin(0, 50), add(0, 50), commit(0, 100, 50), ok(0, 100),
			idle(500, 500),
			idle(400, 500), // a WAL end behind the position
			begin(1, 500), commit(1, 600, 600), idle(600, 600),
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := newAcks()
			a.flushed = c.start
			var txns []*txnAck
			for i, s := range c.steps {
				if s.op != "begin" && s.op != "idle" && s.op != "fail" && s.tx >= len(txns) {
					t.Fatalf("step %d: %v of a transaction not begun", i, s)
				}
				switch s.op {
				case "begin":
					if s.tx != len(txns) {
						t.Fatalf("step %d: %v, but the next transaction is %d", i, s, len(txns))
					}
					txns = append(txns, a.begin())
				case "add":
					a.add(txns[s.tx])
				case "ok":
					a.done(txns[s.tx], nil)
				case "err":
					a.done(txns[s.tx], errors.New("produce failed"))
				case "commit":
					a.commit(txns[s.tx], s.lsn)
				case "idle":
					a.idle(s.lsn)
				case "fail":
					a.fail(errors.New("state write failed"))
				default:
					t.Fatalf("step %d: unknown op %q", i, s.op)
				}
				if got := a.position(); got != s.pos {
					t.Errorf("after step %d, %v: position = %d, want %d", i, s, got, s.pos)
				}
				if got := a.failed(); (got != nil) != s.fail {
					t.Errorf("after step %d, %v: failed = %v, want failed %v", i, s, got, s.fail)
				}
			}
		})
	}
}

// TestAcksFirstErrorKept checks that failed reports the first error, of
// whichever kind.
func TestAcksFirstErrorKept(t *testing.T) {
	a := newAcks()
	tx := a.begin()
	a.add(tx)
	a.add(tx)
	first, second := errors.New("first"), errors.New("second")
	a.done(tx, first)
	a.done(tx, second)
	a.fail(errors.New("third"))
	if err := a.failed(); err != first {
		t.Fatalf("failed = %v, want the first error", err)
	}
}

// TestAcksConcurrent runs the stream's side (begin, add, commit) while
// many goroutines acknowledge the records in any order, as the producer's
// callbacks do, and checks at every position it sees that each
// transaction up to it was acknowledged whole. Run it with -race.
func TestAcksConcurrent(t *testing.T) {
	const (
		txns    = 200
		records = 20
		workers = 16
	)
	end := func(i int) pglogrepl.LSN { return pglogrepl.LSN(1000 * (i + 1)) }
	for _, failAt := range []int{-1, 0, txns / 2, txns - 1} {
		t.Run(fmt.Sprintf("failAt=%d", failAt), func(t *testing.T) {
			a := newAcks()
			// A transaction's records answered, counted before done: once
			// the position passes a transaction, all of them are.
			var acked [txns]atomic.Int32
			check := func(p, prev pglogrepl.LSN) {
				if p < prev {
					t.Errorf("the position went back from %d to %d", prev, p)
				}
				if p%1000 != 0 || p > end(txns-1) {
					t.Errorf("the position %d is no transaction's end", p)
				}
				for i := 0; i < txns && end(i) <= p; i++ {
					if n := acked[i].Load(); n != records {
						t.Errorf("the position %d passed transaction %d with %d of its %d records acknowledged", p, i, n, records)
						return
					}
				}
			}
			type rec struct {
				i   int
				tx  *txnAck
				err error
			}
			work := make(chan rec)
			var wg sync.WaitGroup
			for range workers {
				wg.Go(func() {
					var prev pglogrepl.LSN
					for r := range work {
						acked[r.i].Add(1)
						a.done(r.tx, r.err)
						p := a.position()
						check(p, prev)
						prev = p
					}
				})
			}
			stop := make(chan struct{})
			var observer sync.WaitGroup
			observer.Go(func() {
				var prev pglogrepl.LSN
				for {
					select {
					case <-stop:
						return
					default:
					}
					p := a.position()
					check(p, prev)
					prev = p
					runtime.Gosched()
				}
			})
			rng := rand.New(rand.NewPCG(1, uint64(failAt+2)))
			var pool []rec
			// Some records answered, in any order, while the stream goes on.
			send := func() {
				rng.Shuffle(len(pool), func(x, y int) { pool[x], pool[y] = pool[y], pool[x] })
				n := len(pool) / 2
				for _, r := range pool[:n] {
					work <- r
				}
				pool = append(pool[:0], pool[n:]...)
			}
			for i := range txns {
				tx := a.begin()
				for j := range records {
					a.add(tx)
					r := rec{i: i, tx: tx}
					if i == failAt && j == records/2 {
						r.err = errors.New("produce failed")
					}
					pool = append(pool, r)
					if j == records/2 {
						// Records of a transaction answered while it
						// has more to come.
						send()
					}
				}
				send()
				a.commit(tx, end(i))
			}
			for _, r := range pool {
				work <- r
			}
			close(work)
			wg.Wait()
			close(stop)
			observer.Wait()
			got, err := a.position(), a.failed()
			if failAt < 0 {
				if got != end(txns-1) || err != nil {
					t.Fatalf("position = %d, failed = %v; want %d, nil", got, err, end(txns-1))
				}
				return
			}
			if got >= end(failAt) || err == nil {
				t.Fatalf("position = %d, failed = %v; want before %d (transaction %d failed) and an error", got, err, end(failAt), failAt)
			}
		})
	}
}
