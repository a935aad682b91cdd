package postgres

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf16"

	"github.com/jackc/pgx/v5"

	"github.com/oxbow-dev/oxbow/cdc"
	"github.com/oxbow-dev/oxbow/internal/javajson"
)

// The values of a change are converted from PostgreSQL's text form to the
// JSON that Debezium's PostgreSQL connector writes through Kafka Connect's
// JSON converter (schemas disabled), type by type, as its
// PostgresValueConverter does with the options of Config. The
// differential test (debezium_test.go) holds them to Debezium itself.

// kind is how a column's values are converted.
type kind uint8

const (
	kString kind = iota // the text, as a JSON string
	kBool
	kInt
	kFloat4
	kFloat8
	kNumeric
	kMoney
	kDate
	kTime
	kTimetz
	kTimestamp
	kTimestamptz
	kInterval
	kBytea
	kBits
	kHstore
	kPoint
	kArray
	kUnknown  // a type Debezium does not know: left out (include.unknown.datatypes=false) or its text as bytes
	kGeometry // a geometric type but point: as kUnknown, its numbers as Java writes them (PgJDBC's PGbox, ...)
	kNever    // an array Debezium cannot convert: always left out
	kPostGIS  // PostGIS's geometry and geography: Debezium's Geometry, the EWKB and its SRID
)

// conv is a column's conversion: its kind, the type modifier it applies
// (a precision, a numeric's scale, a bit string's length), and for an
// array its element's.
type conv struct {
	kind   kind
	typmod int32
	elem   *conv
	// toast is the placeholder for an unchanged TOASTed value of the
	// column, as JSON.
	toast []byte
	// delim separates an array's elements.
	delim byte
	// jdbc: values are converted as Debezium converts those it reads
	// through PgJDBC (a snapshot's dates, and the elements of arrays):
	// the infinite dates as PgJDBC gives them, and the era of a date or
	// timestamp before the Common Era lost (0044-03-15 BC as 0044-03-15).
	jdbc bool
}

// pgType is a row of pg_type that conversions need.
type pgType struct {
	name    string
	typtype string // b base, d domain, e enum, r range, ...
	elem    uint32 // an array's element type
	array   bool
	base    uint32 // a domain's base type
	basemod int32
	delim   byte // the separator of its arrays' elements (',', but ':' for PostGIS's)
}

// converter converts the values of one session: the options, and the
// database's types (extensions' and users' types have OIDs of their own).
type converter struct {
	o     options
	types map[uint32]pgType
}

func newConverter(o options) *converter { return &converter{o: o, types: map[uint32]pgType{}} }

// loadTypes reads the database's types.
func (c *converter) loadTypes(ctx context.Context, conn *pgx.Conn) error {
	rows, err := conn.Query(ctx, `SELECT oid, typname, typtype::text, typelem, typcategory = 'A', typbasetype, typtypmod, typdelim::text FROM pg_type`)
	if err != nil {
		return fmt.Errorf("reading the database's types: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var oid uint32
		var t pgType
		var delim string
		if err := rows.Scan(&oid, &t.name, &t.typtype, &t.elem, &t.array, &t.base, &t.basemod, &delim); err != nil {
			return err
		}
		if len(delim) == 1 {
			t.delim = delim[0]
		}
		c.types[oid] = t
	}
	return rows.Err()
}

// knows reports whether the type is loaded (a type made after the session
// began is not: load them again).
func (c *converter) knows(oid uint32) bool {
	_, ok := c.types[oid]
	return ok || builtin(oid) != kString
}

// PostgreSQL's type OIDs that are not written as strings.
const (
	oidBool        = 16
	oidBytea       = 17
	oidInt8        = 20
	oidInt2        = 21
	oidInt4        = 23
	oidOID         = 26
	oidPoint       = 600
	oidFloat4      = 700
	oidFloat8      = 701
	oidMoney       = 790
	oidDate        = 1082
	oidTime        = 1083
	oidTimestamp   = 1114
	oidTimestamptz = 1184
	oidInterval    = 1186
	oidTimetz      = 1266
	oidBit         = 1560
	oidVarbit      = 1562
	oidNumeric     = 1700
)

func builtin(oid uint32) kind {
	switch oid {
	case oidBool:
		return kBool
	case oidInt2, oidInt4, oidInt8, oidOID:
		return kInt
	case oidFloat4:
		return kFloat4
	case oidFloat8:
		return kFloat8
	case oidNumeric:
		return kNumeric
	case oidMoney:
		return kMoney
	case oidDate:
		return kDate
	case oidTime:
		return kTime
	case oidTimetz:
		return kTimetz
	case oidTimestamp:
		return kTimestamp
	case oidTimestamptz:
		return kTimestamptz
	case oidInterval:
		return kInterval
	case oidBytea:
		return kBytea
	case oidBit, oidVarbit:
		return kBits
	case oidPoint:
		return kPoint
	}
	return kString
}

// resolve works out a column's conversion from its type and modifier;
// snapshot: for a snapshot's rows (see conv.jdbcDates).
func (c *converter) resolve(oid uint32, typmod int32, snapshot bool) *conv {
	cv := c.resolve1(oid, typmod, 0)
	cv.toast = c.placeholder(oid, cv)
	cv.jdbc = snapshot && cv.kind == kDate
	return cv
}

// Built-in types Debezium's connector has no converter for, and arrays it
// cannot convert (PostgresValueConverter's TODO DBZ-459).
var unknownBuiltins = map[uint32]kind{
	601: kGeometry, 602: kGeometry, 603: kGeometry, 604: kGeometry, 628: kGeometry, 718: kGeometry, // lseg, path, box, polygon, line, circle
	3615: kUnknown, 3220: kUnknown, 2970: kUnknown, 5038: kUnknown, // tsquery, pg_lsn, txid_snapshot, pg_snapshot
	791: kNever, 1187: kNever, 143: kNever, 1003: kNever, 1017: kNever, 1563: kNever, // arrays of money, interval, xml, name, point, varbit
}

// The types of extensions that Debezium knows.
var knownExtensionTypes = map[string]bool{"hstore": true, "citext": true, "ltree": true, "isbn": true,
	"geometry": true, "geography": true, "vector": true, "halfvec": true, "sparsevec": true}

func (c *converter) resolve1(oid uint32, typmod int32, depth int) *conv {
	if k := builtin(oid); k != kString {
		return &conv{kind: k, typmod: typmod}
	}
	if k, ok := unknownBuiltins[oid]; ok {
		return &conv{kind: k}
	}
	t, ok := c.types[oid]
	switch {
	case !ok || depth > 8:
		return &conv{kind: kString}
	case t.typtype == "d" && t.base != 0:
		mod := typmod
		if mod < 0 {
			mod = t.basemod
		}
		return c.resolve1(t.base, mod, depth+1)
	case t.array && t.elem != 0:
		// An array's modifier is its elements'.
		elem := c.resolve1(t.elem, typmod, depth+1)
		if elem.kind == kUnknown || elem.kind == kGeometry || (c.types[t.elem].typtype == "d") {
			return &conv{kind: kNever} // nor arrays of a domain
		}
		elem.jdbc = true
		delim := byte(',')
		if d := c.types[t.elem].delim; d != 0 {
			delim = d
		}
		return &conv{kind: kArray, typmod: typmod, elem: elem, delim: delim}
	case t.name == "hstore":
		return &conv{kind: kHstore}
	case t.name == "geometry" || t.name == "geography":
		return &conv{kind: kPostGIS}
	case t.typtype == "c" || (oid >= 16384 && t.typtype == "b" && !knownExtensionTypes[t.name]):
		return &conv{kind: kUnknown} // a composite, or a type of an extension Debezium does not know
	}
	return &conv{kind: kString}
}

// The forms of the unchanged-TOAST placeholder Debezium writes, by type
// (UnchangedToastedReplicationMessageColumn).
func (c *converter) placeholder(oid uint32, cv *conv) []byte {
	p := []byte(cdc.Unavailable)
	name := c.types[oid].name
	switch {
	case cv.kind == kBytea && c.o.binary == "base64-url-safe":
		return []byte("null") // Debezium cannot convert its own placeholder
	case cv.kind == kBytea && c.o.binary != "hex":
		return c.appendBinary(nil, p)
	case cv.kind == kHstore:
		if c.o.hstore == "map" {
			return []byte(`{"` + cdc.Unavailable + `":"` + cdc.Unavailable + `"}`)
		}
		return javajson.AppendString(nil, []byte(`{"`+cdc.Unavailable+`":"`+cdc.Unavailable+`"}`))
	}
	switch name {
	case "_text", "_varchar", "_bpchar", "_json", "_jsonb":
		return []byte(`["` + cdc.Unavailable + `"]`)
	case "_bytea":
		return append(append([]byte{'['}, c.appendBinary(nil, p)...), ']')
	case "_int4", "_date", "_int8":
		b := []byte{'['}
		for i, x := range p {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, int64(x), 10)
		}
		return append(b, ']')
	case "_uuid":
		return []byte(`["b68a35a7-17ad-35b3-af2a-ae46edb4545a"]`) // UUID.nameUUIDFromBytes of the placeholder
	}
	return javajson.AppendString(nil, p)
}

// appendValue appends a value's JSON; text is its PostgreSQL text form. A
// value that does not parse as its type is written as a string.
func (c *converter) appendValue(b []byte, cv *conv, text []byte) []byte {
	if out, ok := c.appendTyped(b, cv, string(text)); ok {
		return out
	}
	return javajson.AppendString(b, text)
}

func (c *converter) appendTyped(b []byte, cv *conv, s string) ([]byte, bool) {
	switch cv.kind {
	case kBool:
		switch s {
		case "t":
			return append(b, "true"...), true
		case "f":
			return append(b, "false"...), true
		}
	case kInt:
		if _, err := strconv.ParseInt(s, 10, 64); err == nil {
			return append(b, s...), true
		}
	case kFloat4:
		if f, err := strconv.ParseFloat(s, 32); err == nil {
			return javajson.AppendFloat(b, f, 32), true
		}
	case kFloat8:
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			return javajson.AppendFloat(b, f, 64), true
		}
	case kNumeric:
		return c.appendNumeric(b, s, cv.typmod)
	case kMoney:
		return c.appendMoney(b, s)
	case kDate:
		if d, ok := parseDate(s, cv.jdbc); ok {
			return strconv.AppendInt(b, d, 10), true
		}
	case kTime:
		if us, ok := parseTimeOfDay(s); ok {
			if c.millis(cv.typmod, true) {
				return strconv.AppendInt(b, us/1000, 10), true
			}
			return strconv.AppendInt(b, us, 10), true
		}
	case kTimetz:
		return appendTimetz(b, s)
	case kTimestamp:
		if us, ok := parseTimestamp(s, cv.jdbc); ok {
			if c.millis(cv.typmod, false) {
				return strconv.AppendInt(b, floorDiv(us, 1000), 10), true
			}
			return strconv.AppendInt(b, us, 10), true
		}
	case kTimestamptz:
		return appendTimestamptz(b, s, cv.typmod, cv.jdbc)
	case kInterval:
		return c.appendInterval(b, s)
	case kBytea:
		if len(s) >= 2 && s[0] == '\\' && s[1] == 'x' {
			raw, err := hex.DecodeString(s[2:])
			if err == nil {
				return c.appendBinary(b, raw), true
			}
		}
	case kBits:
		return appendBits(b, s, cv.typmod)
	case kHstore:
		return c.appendHstore(b, s)
	case kPoint:
		return appendPoint(b, s)
	case kArray:
		return c.appendArray(b, cv, s)
	case kUnknown:
		return c.appendBinary(b, []byte(s)), true // include.unknown.datatypes: the text's bytes
	case kGeometry:
		return c.appendBinary(b, javaNumbers(s)), true
	case kPostGIS:
		return appendPostGIS(b, s)
	case kString:
		return javajson.AppendString(b, []byte(s)), true
	}
	return b, false
}

// millis: a time or timestamp of this precision is in milliseconds
// (Debezium's Time and Timestamp) rather than microseconds.
func (c *converter) millis(typmod int32, isTime bool) bool {
	switch c.o.time {
	case "connect":
		return true
	case "adaptive_time_microseconds":
		if isTime {
			return false
		}
	}
	return typmod >= 0 && typmod <= 3
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// appendNumeric writes a numeric by decimal.handling.mode; typmod holds
// the precision and scale (-1: neither, a variable scale).
func (c *converter) appendNumeric(b []byte, s string, typmod int32) ([]byte, bool) {
	special := s == "NaN" || s == "Infinity" || s == "-Infinity"
	switch c.o.decimal {
	case "string":
		switch s {
		case "NaN":
			s = "NAN" // the names of Debezium's SpecialValue
		case "Infinity":
			s = "POSITIVE_INFINITY"
		case "-Infinity":
			s = "NEGATIVE_INFINITY"
		}
		return javajson.AppendString(b, []byte(s)), true
	case "double":
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return b, false
		}
		return javajson.AppendFloat(b, f, 64), true
	}
	if special {
		return append(b, "null"...), true // precise has no NaN
	}
	unscaled, scale, ok := parseDecimal(s)
	if !ok {
		return b, false
	}
	if typmod < 0 {
		// VariableScaleDecimal: trailing zeros stripped, no negative scale.
		ten := big.NewInt(10)
		var q, r big.Int
		for scale > 0 {
			q.QuoRem(unscaled, ten, &r)
			if r.Sign() != 0 {
				break
			}
			unscaled.Set(&q)
			scale--
		}
		b = append(b, `{"scale":`...)
		b = strconv.AppendInt(b, int64(scale), 10)
		b = append(b, `,"value":`...)
		b = appendBigInt(b, unscaled)
		return append(b, '}'), true
	}
	want := int((typmod - 4) & 0xffff)
	unscaled = rescale(unscaled, scale, want)
	return appendBigInt(b, unscaled), true
}

// appendMoney writes money as a decimal of two fraction digits (Debezium's
// money.fraction.digits default), its text as lc_monetary=C writes it
// ("-$1,234.56").
func (c *converter) appendMoney(b []byte, s string) ([]byte, bool) {
	neg := strings.ContainsAny(s, "-(")
	digits := strings.Map(func(r rune) rune {
		if (r >= '0' && r <= '9') || r == '.' {
			return r
		}
		return -1
	}, s)
	if neg {
		digits = "-" + digits
	}
	unscaled, scale, ok := parseDecimal(digits)
	if !ok {
		return b, false
	}
	unscaled = rescale(unscaled, scale, 2)
	switch c.o.decimal {
	case "string":
		return javajson.AppendString(b, []byte(formatDecimal(unscaled, 2))), true
	case "double":
		f, _ := strconv.ParseFloat(formatDecimal(unscaled, 2), 64)
		return javajson.AppendFloat(b, f, 64), true
	}
	return appendBigInt(b, unscaled), true
}

// parseDecimal reads a decimal's digits: the unscaled value and the scale.
func parseDecimal(s string) (*big.Int, int, bool) {
	mant, exp := s, 0
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		e, err := strconv.Atoi(s[i+1:])
		if err != nil {
			return nil, 0, false
		}
		mant, exp = s[:i], e
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	n, ok := new(big.Int).SetString(intPart+frac, 10)
	if !ok {
		return nil, 0, false
	}
	scale := len(frac) - exp
	if scale < 0 {
		n.Mul(n, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(-scale)), nil))
		scale = 0
	}
	return n, scale, true
}

// rescale changes an unscaled value's scale, rounding half up.
func rescale(n *big.Int, from, to int) *big.Int {
	switch {
	case from == to:
		return n
	case from < to:
		return n.Mul(n, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(to-from)), nil))
	}
	d := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(from-to)), nil)
	q, r := new(big.Int).QuoRem(n, d, new(big.Int))
	if r.Abs(r).Mul(r, big.NewInt(2)).Cmp(d) >= 0 {
		if n.Sign() < 0 {
			q.Sub(q, big.NewInt(1))
		} else {
			q.Add(q, big.NewInt(1))
		}
	}
	return q
}

func formatDecimal(n *big.Int, scale int) string {
	s := new(big.Int).Abs(n).String()
	for len(s) <= scale {
		s = "0" + s
	}
	if scale > 0 {
		s = s[:len(s)-scale] + "." + s[len(s)-scale:]
	}
	if n.Sign() < 0 {
		s = "-" + s
	}
	return s
}

// appendBigInt appends the base64 of n's two's-complement big-endian
// bytes, the fewest that hold it (Java's BigInteger.toByteArray): Kafka
// Connect's Decimal, as the JSON converter writes it.
func appendBigInt(b []byte, n *big.Int) []byte {
	var raw []byte
	if n.Sign() >= 0 {
		raw = n.Bytes()
		if len(raw) == 0 || raw[0]&0x80 != 0 {
			raw = append([]byte{0}, raw...)
		}
	} else {
		m := new(big.Int).Not(n) // -n-1
		raw = m.Bytes()
		for i := range raw {
			raw[i] = ^raw[i]
		}
		if len(raw) == 0 || raw[0]&0x80 == 0 {
			raw = append([]byte{0xff}, raw...)
		}
	}
	b = append(b, '"')
	b = base64.StdEncoding.AppendEncode(b, raw)
	return append(b, '"')
}

// The values Debezium writes for PostgreSQL's infinite dates and
// timestamps (from PgJDBC's DATE_POSITIVE_INFINITY and its own constants).
const (
	dateInfinity         = -2147472692 // LocalDate -5877611-06-21
	dateNegInfinity      = -2147472691 // LocalDate -5877611-06-22
	timestampInfinity    = 9223372036825200000
	timestampNegInfinity = -9223372036832400000
)

// The days Debezium writes for the infinite dates it reads through JDBC
// (PgJDBC's DATE_POSITIVE_INFINITY and DATE_NEGATIVE_INFINITY, taken
// through java.sql.Date), as its own runs show them.
const (
	jdbcDateInfinity    = -622191234
	jdbcDateNegInfinity = -625821272
)

// parseDate reads a date ("2024-02-29", "0044-03-15 BC", "infinity") as
// days since 1970-01-01 in the proleptic Gregorian calendar, or with jdbc
// as Debezium's JDBC path has it (see conv.jdbc).
func parseDate(s string, jdbc bool) (int64, bool) {
	switch {
	case s == "infinity" && jdbc:
		return jdbcDateInfinity, true
	case s == "-infinity" && jdbc:
		return jdbcDateNegInfinity, true
	case s == "infinity":
		return dateInfinity, true
	case s == "-infinity":
		return dateNegInfinity, true
	}
	s, bc := strings.CutSuffix(s, " BC")
	y, m, d, ok := splitDate(s)
	if !ok {
		return 0, false
	}
	if bc && !jdbc {
		y = 1 - y
	}
	if jdbc && y == 1582 && m == 10 && d >= 5 && d <= 14 {
		d += 10 // days that the Julian-Gregorian calendar of java.sql.Date skips
	}
	return daysFromCivil(y, m, d), true
}

func splitDate(s string) (y, m, d int64, ok bool) {
	parts := strings.Split(s, "-")
	if len(parts) != 3 {
		return 0, 0, 0, false
	}
	var err [3]error
	y, err[0] = strconv.ParseInt(parts[0], 10, 64)
	m, err[1] = strconv.ParseInt(parts[1], 10, 64)
	d, err[2] = strconv.ParseInt(parts[2], 10, 64)
	return y, m, d, err[0] == nil && err[1] == nil && err[2] == nil && m >= 1 && m <= 12 && d >= 1 && d <= 31
}

// daysFromCivil is the day number of a proleptic Gregorian date
// (astronomical years: 0 is 1 BC) since 1970-01-01.
func daysFromCivil(y, m, d int64) int64 {
	if m <= 2 {
		y--
	}
	era := floorDiv(y, 400)
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

// parseTimeOfDay reads "HH:MM:SS[.ffffff]" (HH up to 24) as microseconds.
func parseTimeOfDay(s string) (int64, bool) {
	if len(s) < 8 || s[2] != ':' || s[5] != ':' {
		return 0, false
	}
	h, err1 := strconv.Atoi(s[:2])
	m, err2 := strconv.Atoi(s[3:5])
	sec, err3 := strconv.Atoi(s[6:8])
	if err1 != nil || err2 != nil || err3 != nil || h > 24 || m > 59 || sec > 60 {
		return 0, false
	}
	us := (int64(h)*3600 + int64(m)*60 + int64(sec)) * 1e6
	if rest := s[8:]; rest != "" {
		if rest[0] != '.' || len(rest) > 7 {
			return 0, false
		}
		f, err := strconv.Atoi((rest[1:] + "000000")[:6])
		if err != nil {
			return 0, false
		}
		us += int64(f)
	}
	return us, true
}

// splitOffset cuts a "+HH[:MM[:SS]]" offset off a time, as seconds east.
func splitOffset(s string) (string, int64, bool) {
	i := strings.LastIndexAny(s, "+-")
	if i < 0 {
		return s, 0, false
	}
	sign := int64(1)
	if s[i] == '-' {
		sign = -1
	}
	var secs int64
	for j, p := range strings.Split(s[i+1:], ":") {
		v, err := strconv.ParseInt(p, 10, 64)
		if err != nil || j > 2 {
			return s, 0, false
		}
		secs += v * []int64{3600, 60, 1}[j]
	}
	return s[:i], sign * secs, true
}

const dayMicros = 86400 * 1e6

// appendTimetz writes a time with time zone in UTC, as Debezium's
// ZonedTime: "10:34:56.789Z" (24:00:00 at UTC stays "24:00:00Z").
func appendTimetz(b []byte, s string) ([]byte, bool) {
	t, off, ok := splitOffset(s)
	if !ok {
		return b, false
	}
	us, ok := parseTimeOfDay(t)
	if !ok {
		return b, false
	}
	if us == dayMicros && off == 0 {
		return append(b, `"24:00:00Z"`...), true
	}
	us = ((us-off*1e6)%dayMicros + dayMicros) % dayMicros
	b = append(b, '"')
	b = appendClock(b, us, -1)
	return append(b, `Z"`...), true
}

// appendClock appends HH:MM:SS and the fraction: width digits, or with
// width < 0 as few as it takes (none for a whole second), as Java's ISO
// formatters do.
func appendClock(b []byte, us int64, width int) []byte {
	secs := us / 1e6
	b = append(b, fmt.Sprintf("%02d:%02d:%02d", secs/3600, secs/60%60, secs%60)...)
	frac := us % 1e6
	switch {
	case width > 0:
		digits := fmt.Sprintf("%06d", frac)
		for len(digits) < width {
			digits += "0"
		}
		b = append(b, '.')
		b = append(b, digits[:width]...)
	case width < 0 && frac != 0:
		b = append(b, '.')
		b = append(b, strings.TrimRight(fmt.Sprintf("%06d", frac), "0")...)
	}
	return b
}

// parseTimestamp reads "2024-01-02 03:04:05[.ffffff][ BC]" (or infinity)
// as microseconds since the epoch (with jdbc, see conv.jdbc).
func parseTimestamp(s string, jdbc bool) (int64, bool) {
	switch s {
	case "infinity":
		return timestampInfinity, true
	case "-infinity":
		return timestampNegInfinity, true
	}
	s, bc := strings.CutSuffix(s, " BC")
	date, clock, ok := strings.Cut(s, " ")
	if !ok {
		return 0, false
	}
	y, m, d, ok := splitDate(date)
	if !ok {
		return 0, false
	}
	if bc && !jdbc {
		y = 1 - y
	}
	us, ok := parseTimeOfDay(clock)
	if !ok {
		return 0, false
	}
	return daysFromCivil(y, m, d)*dayMicros + us, true
}

// appendTimestamptz writes a timestamp with time zone as Debezium's
// ZonedTimestamp: ISO 8601 in UTC, with as many fraction digits as the
// column's precision (6 without one; none for 0).
func appendTimestamptz(b []byte, s string, typmod int32, jdbc bool) ([]byte, bool) {
	if s == "infinity" || s == "-infinity" {
		return javajson.AppendString(b, []byte(s)), true
	}
	s, bc := strings.CutSuffix(s, " BC")
	t, off, ok := splitOffset(s)
	if !ok {
		return b, false
	}
	if bc {
		t += " BC"
	}
	us, ok := parseTimestamp(t, jdbc)
	if !ok {
		return b, false
	}
	us -= off * 1e6
	days := floorDiv(us, dayMicros)
	y, m, d := civilFromDays(days)
	b = append(b, '"')
	switch {
	case y < 0:
		b = append(b, fmt.Sprintf("-%04d", -y)...)
	case y > 9999:
		b = append(b, fmt.Sprintf("+%d", y)...)
	default:
		b = append(b, fmt.Sprintf("%04d", y)...)
	}
	b = append(b, fmt.Sprintf("-%02d-%02dT", m, d)...)
	width := int(typmod)
	if typmod < 0 {
		width = 6
	}
	if width == 0 {
		width = -1
	}
	b = appendClock(b, us-days*dayMicros, width)
	return append(b, `Z"`...), true
}

// civilFromDays is daysFromCivil's inverse.
func civilFromDays(z int64) (y, m, d int64) {
	z += 719468
	era := floorDiv(z, 146097)
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	y = yoe + era*400
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d = doy - (153*mp+2)/5 + 1
	m = mp + 3
	if m > 12 {
		m -= 12
	}
	if m <= 2 {
		y++
	}
	return y, m, d
}

// appendInterval writes an interval (in the session's iso_8601 style,
// "P1Y2M3DT4H5M6.789S") by interval.handling.mode: microseconds with a
// month of 30.4375 days (MicroDuration), or Debezium's ISO string.
func (c *converter) appendInterval(b []byte, s string) ([]byte, bool) {
	var f [6]float64 // years, months, days, hours, minutes, seconds
	rest, ok := strings.CutPrefix(s, "P")
	if !ok {
		return b, false
	}
	inTime := false
	for rest != "" {
		if rest[0] == 'T' {
			inTime, rest = true, rest[1:]
			continue
		}
		i := strings.IndexAny(rest, "YMWDHS")
		if i <= 0 {
			return b, false
		}
		v, err := strconv.ParseFloat(rest[:i], 64)
		if err != nil {
			return b, false
		}
		switch {
		case rest[i] == 'Y' && !inTime:
			f[0] = v
		case rest[i] == 'M' && !inTime:
			f[1] = v
		case rest[i] == 'W' && !inTime:
			f[2] += 7 * v
		case rest[i] == 'D' && !inTime:
			f[2] += v
		case rest[i] == 'H' && inTime:
			f[3] = v
		case rest[i] == 'M' && inTime:
			f[4] = v
		case rest[i] == 'S' && inTime:
			f[5] = v
		default:
			return b, false
		}
		rest = rest[i+1:]
	}
	if c.o.interval == "string" {
		sec := strconv.FormatFloat(f[5], 'f', -1, 64)
		if strings.Contains(sec, ".") {
			sec = strings.TrimRight(strings.TrimRight(sec, "0"), ".")
		}
		if sec == "-0" {
			sec = "0"
		}
		return javajson.AppendString(b, fmt.Appendf(nil, "P%dY%dM%dDT%dH%dM%sS", int64(f[0]), int64(f[1]), int64(f[2]), int64(f[3]), int64(f[4]), sec)), true
	}
	months := float64(int32(int32(f[0])*12 + int32(f[1]))) // Java's int arithmetic
	days := months*30.4375 + f[2]
	secs := ((days*24+f[3])*60+f[4])*60 + f[5]
	return strconv.AppendInt(b, javaLong(secs*1e6), 10), true
}

// javaLong is Java's (long) of a double: saturating, 0 for NaN.
func javaLong(f float64) int64 {
	switch {
	case math.IsNaN(f):
		return 0
	case f >= math.MaxInt64:
		return math.MaxInt64
	case f <= math.MinInt64:
		return math.MinInt64
	}
	return int64(f)
}

// javaNumbers rewrites the numbers of a geometric value's text as Java
// writes doubles ("(3,4),(1,2)" as "(3.0,4.0),(1.0,2.0)"), as PgJDBC's
// geometric objects print themselves.
func javaNumbers(s string) []byte {
	var out []byte
	for i := 0; i < len(s); {
		j := i
		for j < len(s) && strings.IndexByte("0123456789.eE+-", s[j]) >= 0 {
			j++
		}
		if j == i {
			out = append(out, s[i])
			i++
			continue
		}
		if f, err := strconv.ParseFloat(s[i:j], 64); err == nil {
			out = javajson.AppendFloat(out, f, 64)
		} else {
			out = append(out, s[i:j]...)
		}
		i = j
	}
	return out
}

// appendBinary writes bytes by binary.handling.mode.
func (c *converter) appendBinary(b []byte, raw []byte) []byte {
	b = append(b, '"')
	switch c.o.binary {
	case "hex":
		b = hex.AppendEncode(b, raw)
	case "base64-url-safe":
		b = base64.URLEncoding.AppendEncode(b, raw)
	default:
		b = base64.StdEncoding.AppendEncode(b, raw)
	}
	return append(b, '"')
}

// appendBits writes a bit string: bit(1) (and varbit(1)) as a boolean,
// longer ones as Debezium's Bits, the bytes of the bit set in
// little-endian order (the last character is bit 0), as few as hold the
// highest set bit.
func appendBits(b []byte, s string, length int32) ([]byte, bool) {
	for _, r := range s {
		if r != '0' && r != '1' {
			return b, false
		}
	}
	if length == 1 {
		return strconv.AppendBool(b, strings.Contains(s, "1")), true
	}
	var raw []byte
	n := len(s)
	for i := 0; i < n; i++ {
		if s[n-1-i] == '1' {
			for len(raw) <= i/8 {
				raw = append(raw, 0)
			}
			raw[i/8] |= 1 << (i % 8)
		}
	}
	b = append(b, '"')
	b = base64.StdEncoding.AppendEncode(b, raw)
	return append(b, '"'), true
}

// appendPostGIS writes a PostGIS value (its text is the hex EWKB) as
// Debezium's Geometry or Geography: the EWKB itself, and the SRID its type
// word's flag says it has (null without).
func appendPostGIS(b []byte, s string) ([]byte, bool) {
	ewkb, err := hex.DecodeString(s)
	if err != nil || len(ewkb) < 9 {
		return b, false
	}
	var order binary.ByteOrder = binary.BigEndian
	if ewkb[0] != 0 {
		order = binary.LittleEndian
	}
	b = append(b, `{"wkb":"`...)
	b = base64.StdEncoding.AppendEncode(b, ewkb)
	b = append(b, `","srid":`...)
	if order.Uint32(ewkb[1:5])&0x20000000 != 0 {
		b = strconv.AppendInt(b, int64(int32(order.Uint32(ewkb[5:9]))), 10)
	} else {
		b = append(b, "null"...)
	}
	return append(b, '}'), true
}

// appendPoint writes a point as Debezium's Point: x, y, its WKB and a null
// SRID.
func appendPoint(b []byte, s string) ([]byte, bool) {
	xs, ys, ok := strings.Cut(strings.Trim(s, "()"), ",")
	if !ok {
		return b, false
	}
	x, err1 := strconv.ParseFloat(xs, 64)
	y, err2 := strconv.ParseFloat(ys, 64)
	if err1 != nil || err2 != nil {
		return b, false
	}
	wkb := []byte{1, 1, 0, 0, 0}
	wkb = binary.LittleEndian.AppendUint64(wkb, math.Float64bits(x))
	wkb = binary.LittleEndian.AppendUint64(wkb, math.Float64bits(y))
	b = append(b, `{"x":`...)
	b = javajson.AppendFloat(b, x, 64)
	b = append(b, `,"y":`...)
	b = javajson.AppendFloat(b, y, 64)
	b = append(b, `,"wkb":"`...)
	b = base64.StdEncoding.AppendEncode(b, wkb)
	return append(b, `","srid":null}`...), true
}

// appendHstore writes an hstore by hstore.handling.mode: a JSON object
// (map) or a string holding one (json). Its pairs come in the order of
// the Java HashMap Debezium reads them into.
func (c *converter) appendHstore(b []byte, s string) ([]byte, bool) {
	pairs, ok := parseHstore(s)
	if !ok {
		return b, false
	}
	pairs = javaHashMapOrder(pairs)
	obj := []byte{'{'}
	for i, p := range pairs {
		if i > 0 {
			obj = append(obj, ',')
		}
		obj = javajson.AppendString(obj, []byte(p.key))
		obj = append(obj, ':')
		if p.null {
			obj = append(obj, "null"...)
		} else {
			obj = javajson.AppendString(obj, []byte(p.value))
		}
	}
	obj = append(obj, '}')
	if c.o.hstore == "map" {
		return append(b, obj...), true
	}
	return javajson.AppendString(b, obj), true
}

// scanQuoted reads the double-quoted string at s[i] (backslash escapes
// the next character), as hstore and arrays write them: its text and the
// index after it.
func scanQuoted(s string, i int) (string, int, bool) {
	if i >= len(s) || s[i] != '"' {
		return "", i, false
	}
	i++
	var sb strings.Builder
	for i < len(s) && s[i] != '"' {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		sb.WriteByte(s[i])
		i++
	}
	if i >= len(s) {
		return "", i, false
	}
	return sb.String(), i + 1, true
}

type hstorePair struct {
	key, value string
	null       bool
}

// parseHstore reads hstore's text: "a"=>"1", "b c"=>NULL.
func parseHstore(s string) ([]hstorePair, bool) {
	var out []hstorePair
	i := 0
	skip := func() {
		for i < len(s) && (s[i] == ' ' || s[i] == ',') {
			i++
		}
	}
	quoted := func() (string, bool) {
		v, next, ok := scanQuoted(s, i)
		i = next
		return v, ok
	}
	for skip(); i < len(s); skip() {
		k, ok := quoted()
		if !ok || !strings.HasPrefix(s[i:], "=>") {
			return nil, false
		}
		i += 2
		if strings.HasPrefix(s[i:], "NULL") {
			out = append(out, hstorePair{key: k, null: true})
			i += 4
			continue
		}
		v, ok := quoted()
		if !ok {
			return nil, false
		}
		out = append(out, hstorePair{key: k, value: v})
	}
	return out, true
}

// javaHashMapOrder orders pairs as a java.util.HashMap of them, filled in
// this order, iterates: by bucket (String.hashCode, spread, in a table of
// the power of two that holds them at a load factor of 0.75), then by
// insertion.
func javaHashMapOrder(pairs []hstorePair) []hstorePair {
	size := 16
	for float64(len(pairs)) > 0.75*float64(size) {
		size *= 2
	}
	type slot struct {
		bucket, i int
	}
	order := make([]slot, len(pairs))
	for i, p := range pairs {
		var h int32
		for _, u := range utf16.Encode([]rune(p.key)) {
			h = 31*h + int32(u)
		}
		spread := uint32(h) ^ (uint32(h) >> 16)
		order[i] = slot{int(spread & uint32(size-1)), i}
	}
	out := make([]hstorePair, 0, len(pairs))
	// A stable sort by bucket.
	buckets := make([][]int, size)
	for _, o := range order {
		buckets[o.bucket] = append(buckets[o.bucket], o.i)
	}
	for _, bk := range buckets {
		for _, i := range bk {
			out = append(out, pairs[i])
		}
	}
	return out
}

// appendArray writes an array as a JSON array of its elements' values. An
// array of more than one dimension is written as Debezium writes it: its
// outer elements, each null.
func (c *converter) appendArray(b []byte, cv *conv, s string) ([]byte, bool) {
	if i := strings.IndexByte(s, '='); i >= 0 && strings.HasPrefix(s, "[") {
		s = s[i+1:] // bounds, as [0:1]={...}
	}
	elems, ok := parseArray(s, cv.delim)
	if !ok {
		return b, false
	}
	if cv.elem.kind == kNumeric {
		for _, e := range elems {
			if e.text == "NaN" || e.text == "Infinity" || e.text == "-Infinity" {
				return append(b, "null"...), true // Debezium cannot convert the array
			}
		}
	}
	b = append(b, '[')
	for i, e := range elems {
		if i > 0 {
			b = append(b, ',')
		}
		switch {
		case e.null || e.nested:
			b = append(b, "null"...)
		default:
			b = c.appendValue(b, cv.elem, []byte(e.text))
		}
	}
	return append(b, ']'), true
}

type arrayElem struct {
	text   string
	null   bool
	nested bool
}

// parseArray reads the top level of an array's text: {a,"b c",NULL,{1,2}}.
func parseArray(s string, delim byte) ([]arrayElem, bool) {
	if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
		return nil, false
	}
	s = s[1 : len(s)-1]
	var out []arrayElem
	if s == "" {
		return out, true
	}
	i := 0
	for {
		var e arrayElem
		switch {
		case i < len(s) && s[i] == '"':
			var ok bool
			if e.text, i, ok = scanQuoted(s, i); !ok {
				return nil, false
			}
		case i < len(s) && s[i] == '{':
			depth, quoted := 0, false
			start := i
			for ; i < len(s); i++ {
				switch {
				case quoted && s[i] == '\\':
					i++
				case s[i] == '"':
					quoted = !quoted
				case !quoted && s[i] == '{':
					depth++
				case !quoted && s[i] == '}':
					depth--
				}
				if depth == 0 {
					i++
					break
				}
			}
			e.text, e.nested = s[start:i], true
		default:
			j := strings.IndexByte(s[i:], delim)
			if j < 0 {
				j = len(s) - i
			}
			e.text = strings.TrimSpace(s[i : i+j])
			e.null = e.text == "NULL"
			i += j
		}
		out = append(out, e)
		if i >= len(s) {
			return out, true
		}
		if s[i] != delim {
			return nil, false
		}
		i++
	}
}

// rowCells are a row's cells from the text values of a query (nil is
// NULL); the values are copied, as the connection reuses its buffer.
func rowCells(values [][]byte) []cell {
	cells := make([]cell, len(values))
	for i, v := range values {
		if v == nil {
			cells[i] = cell{kind: 'n'}
		} else {
			cells[i] = cell{kind: 't', text: append([]byte(nil), v...)}
		}
	}
	return cells
}

// column is a captured table's column.
type column struct {
	name   string
	oid    uint32
	typmod int32 // the type modifier (a time's precision), -1 if none
	key    bool  // part of the primary key
	conv   *conv // its conversion (converter.resolve)
}

// cell is a column's value in a change: null, unchanged TOAST (not
// sent), or its text.
type cell struct {
	kind byte // 'n', 'u' or 't'
	text []byte
}

// appendRow appends a row as a JSON object in the columns' order; with
// keyOnly, only the primary key's columns.
func appendRow(b []byte, cols []column, cells []cell, keyOnly bool, c *converter) []byte {
	b = append(b, '{')
	first := true
	for i, col := range cols {
		if keyOnly && !col.key {
			continue
		}
		cv := col.conv
		if cv.kind == kNever || ((cv.kind == kUnknown || cv.kind == kGeometry) && !c.o.unknown) {
			continue // as Debezium leaves out a column of a type it does not know
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = javajson.AppendString(b, []byte(col.name))
		b = append(b, ':')
		var v cell
		if i < len(cells) {
			v = cells[i]
		}
		switch v.kind {
		case 't':
			b = c.appendValue(b, cv, v.text)
		case 'u':
			b = append(b, cv.toast...)
		default:
			b = append(b, "null"...)
		}
	}
	return append(b, '}')
}
