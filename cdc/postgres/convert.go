package postgres

import (
	"encoding/base64"
	"encoding/hex"
	"strconv"
	"time"

	"github.com/oxbow-dev/oxbow/cdc"
)

// PostgreSQL type OIDs that are not written as JSON strings.
const (
	oidBool        = 16
	oidBytea       = 17
	oidInt8        = 20
	oidInt2        = 21
	oidInt4        = 23
	oidOID         = 26
	oidFloat4      = 700
	oidFloat8      = 701
	oidDate        = 1082
	oidTime        = 1083
	oidTimestamp   = 1114
	oidTimestamptz = 1184
	oidNumeric     = 1700
)

// appendValue appends the JSON of a column's value, given in PostgreSQL's
// text format, as Debezium's PostgreSQL connector writes it with its
// default settings, except numerics:
//
//   - boolean, integer and floating-point types: JSON booleans and numbers
//     (NaN and infinities: strings);
//   - numeric: a JSON number with the exact digits (Debezium's
//     decimal.handling.mode=double would round them; its default,
//     precise, writes the unscaled bytes, which no JSON reader wants);
//   - date: days since 1970-01-01 (io.debezium.time.Date), for every
//     date PostgreSQL and Go share (years 1 to 9999); time: milliseconds
//     since midnight for a precision of 0 to 3 (Time), else microseconds
//     (MicroTime); timestamp: milliseconds since the epoch for a
//     precision of 0 to 3 (Timestamp), else microseconds (MicroTimestamp),
//     as Debezium's default time.precision.mode, adaptive, writes them;
//     timestamptz: an ISO-8601 string in UTC (ZonedTimestamp);
//   - bytea: base64, as Kafka Connect's JSON converter writes bytes;
//   - everything else (text, varchar, uuid, json, jsonb, enums, arrays):
//     a string of its text form (json and jsonb as Debezium's Json, a
//     string holding the document).
//
// A value that does not parse as its type says it is written as a string.
//
// typmod is the column's type modifier (for time and timestamp, the
// precision; -1 if none was given, which is 6).
func appendValue(b []byte, oid uint32, typmod int32, text []byte) []byte {
	millis := typmod >= 0 && typmod <= 3
	switch oid {
	case oidBool:
		if len(text) == 1 && text[0] == 't' {
			return append(b, "true"...)
		}
		if len(text) == 1 && text[0] == 'f' {
			return append(b, "false"...)
		}
	case oidInt2, oidInt4, oidInt8, oidOID:
		if _, err := strconv.ParseInt(string(text), 10, 64); err == nil {
			return append(b, text...)
		}
	case oidFloat4, oidFloat8, oidNumeric:
		if isJSONNumber(text) {
			if _, err := strconv.ParseFloat(string(text), 64); err == nil {
				return append(b, text...)
			}
		}
	case oidDate:
		if t, err := time.Parse(time.DateOnly, string(text)); err == nil {
			// Unix seconds, not a time.Duration: a Duration spans only
			// 1677 to 2262.
			return strconv.AppendInt(b, t.Unix()/86400, 10)
		}
	case oidTime:
		if t, err := time.Parse("15:04:05.999999", string(text)); err == nil {
			us := t.Sub(time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC)).Microseconds()
			if millis {
				return strconv.AppendInt(b, us/1000, 10)
			}
			return strconv.AppendInt(b, us, 10)
		}
	case oidTimestamp:
		if t, err := time.Parse("2006-01-02 15:04:05.999999", string(text)); err == nil {
			if millis {
				return strconv.AppendInt(b, t.UnixMilli(), 10)
			}
			return strconv.AppendInt(b, t.UnixMicro(), 10)
		}
	case oidTimestamptz:
		if t, ok := parseTimestamptz(string(text)); ok {
			b = append(b, '"')
			b = t.UTC().AppendFormat(b, "2006-01-02T15:04:05.999999Z")
			return append(b, '"')
		}
	case oidBytea:
		if len(text) >= 2 && text[0] == '\\' && text[1] == 'x' {
			raw := make([]byte, hex.DecodedLen(len(text)-2))
			if _, err := hex.Decode(raw, text[2:]); err == nil {
				b = append(b, '"')
				b = base64.StdEncoding.AppendEncode(b, raw)
				return append(b, '"')
			}
		}
	}
	return appendString(b, text)
}

// parseTimestamptz reads timestamptz's ISO output (the connection's
// DateStyle is ISO): "2024-01-02 03:04:05.123456+00", offsets possibly
// with minutes and seconds.
func parseTimestamptz(s string) (time.Time, bool) {
	for _, layout := range []string{"2006-01-02 15:04:05.999999-07", "2006-01-02 15:04:05.999999-07:00", "2006-01-02 15:04:05.999999-07:00:00"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

// isJSONNumber: text is a number as JSON writes one (PostgreSQL writes
// numbers so, except NaN and the infinities, and a leading "+" or "."
// never).
func isJSONNumber(text []byte) bool {
	if len(text) == 0 {
		return false
	}
	for _, c := range text {
		switch {
		case c >= '0' && c <= '9', c == '-', c == '.', c == 'e', c == 'E', c == '+':
		default:
			return false
		}
	}
	return text[0] != '.' && text[0] != '+'
}

// appendString appends s as a JSON string.
func appendString(b []byte, s []byte) []byte {
	const hexDigits = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c == '\t':
			b = append(b, '\\', 't')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		default:
			b = append(b, c) // UTF-8 passes through: PostgreSQL's text is valid UTF-8 in a UTF8 database
		}
	}
	return append(b, '"')
}

// column is a captured table's column.
type column struct {
	name   string
	oid    uint32
	typmod int32 // the type modifier (a time's precision), -1 if none
	key    bool  // part of the primary key
}

// cell is a column's value in a change: null, unchanged TOAST (not
// sent), or its text.
type cell struct {
	kind byte // 'n', 'u' or 't'
	text []byte
}

// appendRow appends a row as a JSON object in the columns' order; with
// keyOnly, only the primary key's columns.
func appendRow(b []byte, cols []column, cells []cell, keyOnly bool) []byte {
	b = append(b, '{')
	first := true
	for i, c := range cols {
		if keyOnly && !c.key {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendString(b, []byte(c.name))
		b = append(b, ':')
		var v cell
		if i < len(cells) {
			v = cells[i]
		}
		switch v.kind {
		case 't':
			b = appendValue(b, c.oid, c.typmod, v.text)
		case 'u':
			b = appendString(b, []byte(cdc.Unavailable))
		default:
			b = append(b, "null"...)
		}
	}
	return append(b, '}')
}
