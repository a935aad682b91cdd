package postgres

import (
	"sync"

	"github.com/jackc/pglogrepl"
)

// acks follows which transactions Kafka has acknowledged every change of,
// in commit order: the position reported to the server is the end of the
// last transaction that is acknowledged and after only acknowledged ones.
//
// It is what makes the source safe to crash: the position is what the
// server is told is flushed (the slot's confirmed_flush_lsn) and what the
// state record keeps as Acked, and a restart streams again only what
// comes after it. The invariant, with the transactions in the order they
// were begun (pgoutput, protocol 1, sends each transaction whole at its
// commit, so that is commit order):
//
//   - position is the starting position (flushed, set before the tracker
//     is shared), the end LSN of a committed transaction, or a WAL end
//     passed to idle — and it never moves back;
//   - it is a transaction's end only when that transaction and every one
//     begun before it are committed and every record added to them has
//     been acknowledged by Kafka without error;
//   - it is a WAL end only when, at the call to idle, every transaction
//     begun is such a one (no transaction is open or waiting for Kafka);
//   - after the first error, of a record (done) or of another write
//     (fail), it does not move at all: what Kafka has after a failed write
//     is not known to be whole, and failed tells the session to stop.
//
// A transaction with no records moves the position at its commit, as soon
// as those before it are acknowledged. Acknowledgements can come in any
// order, from any goroutine: a transaction acknowledged whole waits for
// the ones before it. The tracker is conservative, never exact — after an
// error it holds even what was acknowledged before the error — and a
// position held back costs at most records written again after a restart.
type acks struct {
	mu      sync.Mutex
	queue   []*txnAck     // begun and not yet passed, in the order begun
	flushed pglogrepl.LSN // the position
	err     error         // the first error; the position stays
}

// txnAck is one transaction's part in acks: its records Kafka has not
// answered yet, and its end once it is committed.
type txnAck struct {
	pending   int
	committed bool
	end       pglogrepl.LSN
}

func newAcks() *acks { return &acks{} }

// begin starts the next transaction: until it is committed and Kafka has
// acknowledged its records, the position stays before it. Transactions
// must be begun in commit order.
func (a *acks) begin() *txnAck {
	t := &txnAck{}
	a.mu.Lock()
	a.queue = append(a.queue, t)
	a.mu.Unlock()
	return t
}

// add counts a record of t that is about to be produced. It must come
// before the record is produced (so that its done cannot come first) and
// before t is committed (a committed transaction with nothing pending may
// already be passed).
func (a *acks) add(t *txnAck) {
	a.mu.Lock()
	t.pending++
	a.mu.Unlock()
}

// done is Kafka's answer to one record added to t: the produce callback,
// from any goroutine.
func (a *acks) done(t *txnAck, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t.pending--
	if err != nil && a.err == nil {
		a.err = err
	}
	a.advance()
}

// commit ends t at end, the transaction's end LSN (the server's
// TransactionEndLSN: where the next transaction starts), once every record
// of it is added.
func (a *acks) commit(t *txnAck, end pglogrepl.LSN) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t.committed, t.end = true, end
	a.advance()
}

// advance passes the transactions at the front that are committed and
// acknowledged whole, moving the position to the end of the last one. It
// must be called with mu held.
func (a *acks) advance() {
	if a.err != nil {
		return // nothing after a failed write is acknowledged
	}
	for len(a.queue) > 0 && a.queue[0].committed && a.queue[0].pending == 0 {
		if a.queue[0].end > a.flushed {
			a.flushed = a.queue[0].end
		}
		a.queue[0] = nil
		a.queue = a.queue[1:]
	}
}

// idle moves the position to the server's WAL end when no transaction is
// waiting for Kafka: the WAL up to there holds nothing for the slot.
// walEnd is a keepalive's, read between transactions: the server has sent
// every transaction that committed before it.
func (a *acks) idle(walEnd pglogrepl.LSN) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.queue) == 0 && a.err == nil && walEnd > a.flushed {
		a.flushed = walEnd
	}
}

// position is how far Kafka has acknowledged: the LSN to report to the
// server as flushed, and to record as the state's Acked.
func (a *acks) position() pglogrepl.LSN {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.flushed
}

// fail records an error of a write that belongs to no transaction (the
// state record, a heartbeat): the position stays where it is.
func (a *acks) fail(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err == nil {
		a.err = err
	}
}

// failed is the first error of a write, if any: the session stops on it.
func (a *acks) failed() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}
