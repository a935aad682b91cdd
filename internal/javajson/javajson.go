// Package javajson writes JSON numbers and strings as Kafka Connect's
// JsonConverter (Jackson) writes them, byte for byte: what the PostgreSQL
// capture writes (cdc/postgres) and what the registry's AvroToJSON gives
// (engine/serde/registry) must be Debezium's own text.
package javajson

import (
	"math"
	"strconv"
	"strings"
)

// AppendFloat appends a float as Java's Float.toString or
// Double.toString writes it, which is how the JSON converter writes
// floating-point numbers: the shortest digits that read back as the value,
// at least one after the point, in scientific notation ("1.0E10") below
// 10^-3 and from 10^7 on. NaN and the infinities are strings.
func AppendFloat(b []byte, f float64, bits int) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, `"NaN"`...)
	case math.IsInf(f, 1):
		return append(b, `"Infinity"`...)
	case math.IsInf(f, -1):
		return append(b, `"-Infinity"`...)
	}
	abs := math.Abs(f)
	if abs == 0 || (abs >= 1e-3 && abs < 1e7) {
		s := strconv.FormatFloat(f, 'f', -1, bits)
		b = append(b, s...)
		if !strings.Contains(s, ".") {
			b = append(b, ".0"...)
		}
		return b
	}
	s := strconv.FormatFloat(f, 'e', -1, bits)
	mant, exp, _ := strings.Cut(s, "e")
	if !strings.Contains(mant, ".") {
		// Java writes at least two digits: the nearest of two.
		s = strconv.FormatFloat(f, 'e', 1, bits)
		mant, exp, _ = strings.Cut(s, "e")
	}
	b = append(b, mant...)
	b = append(b, 'E')
	e, _ := strconv.Atoi(exp)
	return strconv.AppendInt(b, int64(e), 10)
}

// AppendString appends s as a JSON string, escaped as Jackson (Kafka
// Connect's JSON converter) escapes it: quote, backslash and the control
// characters, as \b \t \n \f \r or \u00XX in upper case; everything else,
// '/' and U+2028 too, as it is.
func AppendString(b []byte, s []byte) []byte {
	const hexDigits = "0123456789ABCDEF"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\b':
			b = append(b, '\\', 'b')
		case c == '\t':
			b = append(b, '\\', 't')
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\f':
			b = append(b, '\\', 'f')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		default:
			b = append(b, c) // UTF-8 passes through
		}
	}
	return append(b, '"')
}
