package engine

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
	"github.com/oxbow-dev/oxbow/engine/serde"
)

// JoinForeignKey joins each row of the left table with the row of the right
// table whose key fk takes from it (an order with its customer): the result
// table has the left table's keys. It stays right when foreign keys change
// and when either side deletes: a left row that now names another right row
// leaves no result from the old one, and a left row or a right row deleted
// deletes the results it made. The tables need not be co-partitioned.
//
// As in Kafka Streams, each result is stamped with the later of the left
// row's and the right row's timestamps (a right update answers with its own
// time), and the result table forwards every result it is given, a delete
// of a key that had no result too (the answer to the delete of a left row,
// or of a right row a left row names), unless it is [Materialized] and the
// record cache drops it (see [OmitAbsentDeletes]).
//
// As in Kafka Streams, the left side subscribes each row to its right row
// through an internal topic partitioned like the right table; the right side
// keeps the subscriptions and answers each one, and every later change of
// the right row, through a second internal topic partitioned like the left
// table. An answer carries a hash of the left value it answers, so one that
// arrives after the left row changed again is dropped rather than applied.
func JoinForeignKey[K, V, KO, VO, VR any](l *Table[K, V], r *Table[KO, VO], fk func(key K, value V) KO, fn func(key K, value V, other VO) VR, opts ...Option) *Table[K, VR] {
	return fkJoin[K, V, KO, VO, VR](l, r, "fk-join", fk, func(k, v, vo any, found bool) any {
		if !found {
			return nil
		}
		return fn(as[K](k), v.(V), vo.(VO))
	}, opts, errors.Join(nilFuncErr(fk == nil, "foreign key"), nilFuncErr(fn == nil, "join")))
}

// LeftJoinForeignKey is JoinForeignKey where every left row has a result:
// one whose foreign key names no right row is joined with found false.
func LeftJoinForeignKey[K, V, KO, VO, VR any](l *Table[K, V], r *Table[KO, VO], fk func(key K, value V) KO, fn func(key K, value V, other VO, found bool) VR, opts ...Option) *Table[K, VR] {
	return fkJoin[K, V, KO, VO, VR](l, r, "fk-left-join", fk, func(k, v, vo any, found bool) any {
		return fn(as[K](k), v.(V), as[VO](vo), found)
	}, opts, errors.Join(nilFuncErr(fk == nil, "foreign key"), nilFuncErr(fn == nil, "join")))
}

// Subscription values: an instruction byte, the hash of the left value
// (16 bytes; zeros when there is none), the left key. The instructions are
// Kafka Streams' (SubscriptionWrapper.Instruction): subscribe and answer
// whether or not the right row exists (PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE),
// unsubscribe silently (DELETE_KEY_NO_PROPAGATE), subscribe and answer only
// if the right row exists (PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE), unsubscribe
// and answer with a delete (DELETE_KEY_AND_PROPAGATE). Response values: the
// hash, a byte saying whether the right row exists (fkFound, its value
// follows), or neither it nor the hash does (fkNoHash: the answer to the
// delete of a left row), then the value.
const (
	fkSubscribe         = 1
	fkUnsubscribe       = 2
	fkSubscribeIfFound  = 3
	fkUnsubscribeAnswer = 4
	fkHashLen           = 16

	fkNotFound = 0
	fkFound    = 1
	fkNoHash   = 2
)

func fkHash(b []byte) []byte {
	h := sha256.Sum256(b)
	return h[:fkHashLen]
}

// fkSubKey is a subscription's store key: the foreign key's length (4
// bytes), the foreign key, the left key, so one right row's subscriptions
// are one prefix.
func fkSubKey(fkb, kb []byte) []byte {
	b := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(fkb)+len(kb)), uint32(len(fkb)))
	return append(append(b, fkb...), kb...)
}

func fkJoin[K, V, KO, VO, VR any](l *Table[K, V], r *Table[KO, VO], op string, fk func(K, V) KO, join func(k, v, vo any, found bool) any, opts []Option, nilErr error) *Table[K, VR] {
	b := l.b
	o, err := b.opts(op, opts, "Materialized", "InMemory", "WithoutChangelog", "ValueSerde", "ResultHeaders")
	headers := o.resultHeaders
	if headers == nil {
		headers = func(hs []Header) []Header { return hs }
	}
	vas, serr := valueSerdeOpt(o, defaultSerde[VR]())
	err = errors.Join(err, serr, b.same(r.b), nilErr)
	// Kafka Streams' KTableImpl.doJoinOnForeignKey: both tables send old
	// values and are read through value getters; the result is a source
	// table of its own (KTableSource), materialized only if asked.
	r.kt.enableSendingOldValues(true)
	l.kt.enableSendingOldValues(true)
	r, l = r.materialized(), l.materialized()
	kt := &ktable{kind: ktableSource, queryable: o.store != ""}
	omit := b.omitAbsent
	leftJoin := op == "fk-left-join"
	name := b.name(op, o, []*topo.Node{l.node, r.node}, "")
	result, subs := storeName(o, name), name+"-subscriptions"
	b.addStore(o, result)
	b.addStore(o, subs)
	lkc, lvc, rkc, rvc, vc := codecOf(l.ks), codecOf(l.vs), codecOf(r.ks), codecOf(r.vs), codecOf(vas)
	raw := codecOf(serde.Bytes)
	internal := func(suffix string) *topo.InternalTopic {
		return &topo.InternalTopic{Name: name + suffix, Kind: topo.RepartitionTopic, LikeReader: true}
	}
	subTopic, respTopic := internal("-subscription"), internal("-response")
	encode := func(c topo.Codec, v any) ([]byte, error) {
		bs, err := c.Encode(v)
		if err == nil && bs == nil {
			bs = []byte{}
		}
		return bs, err
	}
	// writeResult sets a left key's result (nil: none) as Kafka Streams'
	// result table does: every one goes downstream, a delete of a key
	// without a result too, unless the result is materialized and the
	// record cache drops it (or OmitAbsentDeletes).
	writeResult := func(res *kvAccess, kb []byte, rec topo.Record, out any) error {
		_, old, _, had, err := res.getKey(rec)
		if err != nil {
			return err
		}
		rec.Headers = headers(rec.Headers)
		if out == nil && !had {
			if omit {
				return nil
			}
			return res.deleteAbsent(kb, rec, rec.Timestamp)
		}
		return res.updateKey(kb, rec, old, out, rec.Timestamp)
	}

	// Left side: subscribe each row to its right row (and unsubscribe it
	// from the one it named before), with the instructions of Kafka
	// Streams' SubscriptionSendProcessorSupplier.
	subscribe := b.add(&topo.Node{Name: name + "-subscribe", Kind: topo.ProcessorNode, Op: op, Parents: []*topo.Node{l.node},
		New: stateless(func(c *topo.Context, rec topo.Record) error {
			ch, _ := rec.Value.(topo.Change)
			if rec.Key == nil || (ch.Old == nil && ch.New == nil) {
				return nil
			}
			kb, err := encode(lkc, rec.Key)
			if err != nil {
				return err
			}
			var oldFK, newFK []byte
			hash := make([]byte, fkHashLen)
			if ch.Old != nil {
				if oldFK, err = encode(rkc, fk(as[K](rec.Key), ch.Old.(V))); err != nil {
					return err
				}
			}
			if ch.New != nil {
				if newFK, err = encode(rkc, fk(as[K](rec.Key), ch.New.(V))); err != nil {
					return err
				}
				vb, err := encode(lvc, ch.New)
				if err != nil {
					return err
				}
				hash = fkHash(vb)
			}
			send := func(fkb []byte, instr byte) error {
				v := append(append([]byte{instr}, hash...), kb...)
				return c.Forward(topo.Record{Key: fkb, Value: v, Timestamp: rec.Timestamp, Headers: rec.Headers})
			}
			moved := ch.Old != nil && (ch.New == nil || !bytes.Equal(oldFK, newFK))
			switch {
			case ch.New == nil && leftJoin:
				// The row's result becomes a delete at once (left-delete);
				// Kafka Streams answers it without a right row.
				return send(oldFK, fkUnsubscribe)
			case ch.New == nil:
				return send(oldFK, fkUnsubscribeAnswer)
			case moved:
				if err := send(oldFK, fkUnsubscribe); err != nil {
					return err
				}
				return send(newFK, fkSubscribe)
			case leftJoin:
				return send(newFK, fkSubscribe)
			default:
				// A new row, or one whose foreign key stayed: an inner join
				// has nothing to take back if the right row is missing.
				return send(newFK, fkSubscribeIfFound)
			}
		})}, nil)
	b.add(&topo.Node{Name: name + "-subscription-sink", Kind: topo.SinkNode, Op: "repartition-sink", Topic: subTopic.Name, Internal: true, InternalTopic: subTopic,
		Parents: []*topo.Node{subscribe}, KeyCodec: raw, ValueCodec: raw}, nil)

	// Left side of a left join: a deleted row's result is a delete, at once.
	// (Kafka Streams sends it a subscription without a foreign key, which
	// comes back as an answer without a right row or a hash.)
	leftDelete := &topo.Node{Name: name + "-left-delete", Kind: topo.ProcessorNode, Op: op, Parents: []*topo.Node{l.node}, Stores: []string{result}}
	leftDelete.New = func() topo.Processor {
		var res kvAccess
		cached := kt.queryable
		return &fproc{
			init: func(c *topo.Context) error { return res.openTable(c, result, lkc, vc, cached, omit) },
			fn: func(c *topo.Context, rec topo.Record) error {
				ch, _ := rec.Value.(topo.Change)
				if !leftJoin || rec.Key == nil || ch.New != nil || ch.Old == nil {
					return nil
				}
				kb, err := encode(lkc, rec.Key)
				if err != nil {
					return err
				}
				return writeResult(&res, kb, rec, nil)
			},
		}
	}
	b.add(leftDelete, nil)

	// Right side: keep the subscriptions, answer each one (Kafka Streams'
	// SubscriptionReceiveProcessorSupplier and SubscriptionJoinProcessorSupplier):
	// an answer has the later timestamp of the subscription and the right
	// row.
	subSource := b.add(&topo.Node{Name: name + "-subscription-source", Kind: topo.SourceNode, Op: "repartition-source", Topic: subTopic.Name, Internal: true, KeyCodec: raw, ValueCodec: raw}, nil)
	answer := func(c *topo.Context, rec topo.Record, kb, hash []byte, state byte, vob []byte) error {
		v := append(append(make([]byte, 0, fkHashLen+1+len(vob)), hash...), state)
		if state == fkFound {
			v = append(v, vob...)
		}
		return c.Forward(topo.Record{Key: kb, Value: v, Timestamp: rec.Timestamp, Headers: rec.Headers})
	}
	keep := &topo.Node{Name: name + "-subscriptions", Kind: topo.ProcessorNode, Op: op, Parents: []*topo.Node{subSource}, Stores: []string{subs, r.store}}
	keep.New = func() topo.Processor {
		var st topo.KVStore
		var right kvAccess
		return &fproc{
			init: func(c *topo.Context) error {
				var err error
				if st, err = c.Store(subs); err != nil {
					return err
				}
				// The right row as last sent downstream, beneath the
				// record cache (see the package doc's differences).
				return right.open(c, r.store, rkc, rvc, false)
			},
			fn: func(c *topo.Context, rec topo.Record) error {
				fkb, _ := rec.Key.([]byte)
				v, _ := rec.Value.([]byte)
				if fkb == nil || len(v) < 1+fkHashLen {
					c.Skip("malformed foreign-key subscription")
					return nil
				}
				instr, hash, kb := v[0], v[1:1+fkHashLen], v[1+fkHashLen:]
				sk := fkSubKey(fkb, kb)
				switch instr {
				case fkUnsubscribe, fkUnsubscribeAnswer:
					if err := st.Delete(sk, rec.Timestamp.UnixMilli()); err != nil {
						return err
					}
				default:
					if err := st.Put(sk, hash, rec.Timestamp.UnixMilli()); err != nil {
						return err
					}
				}
				if instr == fkUnsubscribe {
					return nil
				}
				e, found, err := right.st.Get(fkb)
				if err != nil {
					return err
				}
				if found && e.Timestamp > rec.Timestamp.UnixMilli() {
					rec.Timestamp = topo.TimeOf(e.Timestamp)
				}
				switch {
				case instr == fkUnsubscribeAnswer:
					return answer(c, rec, kb, hash, fkNoHash, nil)
				case found:
					return answer(c, rec, kb, hash, fkFound, e.Value)
				case instr == fkSubscribe:
					return answer(c, rec, kb, hash, fkNotFound, nil)
				}
				return nil
			},
		}
	}
	b.add(keep, nil)
	// Right side: a changed right row answers every subscription to it
	// (ForeignTableJoinProcessorSupplier), at the update's timestamp.
	update := &topo.Node{Name: name + "-right-update", Kind: topo.ProcessorNode, Op: op, Parents: []*topo.Node{r.node}, Stores: []string{subs, r.store}}
	update.New = func() topo.Processor {
		var st topo.KVStore
		return &fproc{
			init: func(c *topo.Context) error {
				var err error
				st, err = c.Store(subs)
				return err
			},
			fn: func(c *topo.Context, rec topo.Record) error {
				ch, _ := rec.Value.(topo.Change)
				if rec.Key == nil {
					return nil
				}
				fkb, err := encode(rkc, rec.Key)
				if err != nil {
					return err
				}
				var vob []byte
				state := byte(fkNotFound)
				if ch.New != nil {
					if vob, err = encode(rvc, ch.New); err != nil {
						return err
					}
					state = fkFound
				}
				prefix := fkSubKey(fkb, nil)
				type sub struct{ kb, hash []byte }
				var found []sub
				for e, err := range st.Range(prefix, prefixEnd(prefix)) {
					if err != nil {
						return err
					}
					found = append(found, sub{bytes.Clone(e.Key[len(prefix):]), bytes.Clone(e.Value)})
				}
				for _, s := range found {
					if err := answer(c, rec, s.kb, s.hash, state, vob); err != nil {
						return err
					}
				}
				return nil
			},
		}
	}
	b.add(update, nil)
	b.add(&topo.Node{Name: name + "-response-sink", Kind: topo.SinkNode, Op: "repartition-sink", Topic: respTopic.Name, Internal: true, InternalTopic: respTopic,
		Parents: []*topo.Node{keep, update}, KeyCodec: raw, ValueCodec: raw}, nil)

	// Left side: apply an answer that is still about the row's current
	// value (Kafka Streams' ResponseJoinProcessorSupplier): one without a
	// hash is about a deleted row.
	respSource := b.add(&topo.Node{Name: name + "-response-source", Kind: topo.SourceNode, Op: "repartition-source", Topic: respTopic.Name, Internal: true, KeyCodec: raw, ValueCodec: raw}, nil)
	resolve := &topo.Node{Name: name + "-resolve", Kind: topo.ProcessorNode, Op: op, Parents: []*topo.Node{respSource}, Stores: []string{result, l.store}}
	resolve.New = func() topo.Processor {
		var res, left kvAccess
		cached := kt.queryable
		return &fproc{
			init: func(c *topo.Context) error {
				if err := res.openTable(c, result, lkc, vc, cached, omit); err != nil {
					return err
				}
				return left.open(c, l.store, lkc, lvc, true)
			},
			fn: func(c *topo.Context, rec topo.Record) error {
				kb, _ := rec.Key.([]byte)
				v, _ := rec.Value.([]byte)
				if kb == nil || len(v) < fkHashLen+1 {
					c.Skip("malformed foreign-key response")
					return nil
				}
				hash, state, vob := v[:fkHashLen], v[fkHashLen], v[fkHashLen+1:]
				e, ok, err := left.tbl.Get(kb)
				if err != nil {
					return err
				}
				if state == fkNoHash {
					if ok {
						return nil // the row is back since: a later answer is coming
					}
				} else if !ok || !bytes.Equal(fkHash(e.Value), hash) {
					return nil // the left row is gone or has changed since: a later answer is coming
				}
				k, err := lkc.Decode(kb)
				if err != nil {
					return left.err("key", kb, false, err)
				}
				rec.Key = k
				var out any
				if ok {
					lv, err := lvc.Decode(e.Value)
					if err != nil {
						return left.err("value", e.Value, false, err)
					}
					var vo any
					if state == fkFound {
						if vo, err = rvc.Decode(vob); err != nil {
							return left.err("value", vob, false, err)
						}
					}
					out = join(k, lv, vo, state == fkFound)
				}
				return writeResult(&res, kb, rec, out)
			},
		}
	}
	b.add(resolve, nil)
	n := &topo.Node{Name: name, Kind: topo.ProcessorNode, Op: op + "-merge", Parents: []*topo.Node{leftDelete, resolve}, New: stateless(func(c *topo.Context, r topo.Record) error {
		return c.Forward(r)
	})}
	b.add(n, errors.Join(err, nilSerdes(l.ks == nil || r.ks == nil, l.vs == nil || r.vs == nil)))
	return kept(&Table[K, VR]{b: b, node: n, ks: l.ks, vs: vas, store: result, kt: kt}, StoreInfo{})
}
