package engine

import (
	"bytes"
	"encoding/binary"

	"github.com/oxbow-dev/oxbow/engine/internal/topo"
)

// The byte layout of what the join grace buffer and the window suppression
// keep of a record: fields length-prefixed (uvarint), and headers as a
// count, then each header's key as a field and its value as 0 (nil) or its
// length plus one, then the value.

// appendField appends b, length-prefixed.
func appendField(dst, b []byte) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(b))), b...)
}

// appendHeaders appends hs.
func appendHeaders(dst []byte, hs []topo.Header) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(hs)))
	for _, h := range hs {
		dst = appendField(dst, []byte(h.Key))
		if h.Value == nil {
			dst = binary.AppendUvarint(dst, 0)
			continue
		}
		dst = append(binary.AppendUvarint(dst, uint64(len(h.Value))+1), h.Value...)
	}
	return dst
}

// fieldReader reads what appendField and appendHeaders wrote; once a read
// finds the bytes short, ok is false and every later read gives nothing.
type fieldReader struct {
	rest []byte
	ok   bool
}

func newFieldReader(b []byte) *fieldReader { return &fieldReader{rest: b, ok: true} }

func (r *fieldReader) uvarint() uint64 {
	if !r.ok {
		return 0
	}
	n, w := binary.Uvarint(r.rest)
	if w <= 0 {
		r.ok = false
		return 0
	}
	r.rest = r.rest[w:]
	return n
}

func (r *fieldReader) take(n uint64) []byte {
	if !r.ok || uint64(len(r.rest)) < n {
		r.ok = false
		return nil
	}
	out := r.rest[:n:n]
	r.rest = r.rest[n:]
	return out
}

// field reads a field (never nil when ok).
func (r *fieldReader) field() []byte {
	b := r.take(r.uvarint())
	if b == nil && r.ok {
		b = []byte{}
	}
	return b
}

// headers reads headers, copying their values.
func (r *fieldReader) headers() []topo.Header {
	n := r.uvarint()
	if n > uint64(len(r.rest)) {
		r.ok = false
	}
	var hs []topo.Header
	for i := uint64(0); i < n && r.ok; i++ {
		h := topo.Header{Key: string(r.field())}
		if vl := r.uvarint(); vl > 0 {
			h.Value = bytes.Clone(r.take(vl - 1))
		}
		hs = append(hs, h)
	}
	return hs
}
