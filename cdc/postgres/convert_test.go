package postgres

import "testing"

// Values as Debezium's PostgreSQL connector writes them with its defaults
// (time.precision.mode=adaptive): dates over the whole range PostgreSQL
// and Go share, times and timestamps of precision 0 to 3 in milliseconds,
// above (or unspecified) in microseconds.
func TestAppendValueTimes(t *testing.T) {
	for _, c := range []struct {
		oid    uint32
		typmod int32
		text   string
		want   string
	}{
		{oidDate, -1, "1970-01-01", "0"},
		{oidDate, -1, "2024-03-01", "19783"},
		{oidDate, -1, "0001-01-01", "-719162"}, // through a time.Duration it was clamped to -106751
		{oidDate, -1, "9999-12-31", "2932896"},
		{oidDate, -1, "1969-12-31", "-1"},
		{oidTimestamp, -1, "2024-01-02 03:04:05.123456", "1704164645123456"},
		{oidTimestamp, 6, "2024-01-02 03:04:05.123456", "1704164645123456"},
		{oidTimestamp, 4, "2024-01-02 03:04:05.1234", "1704164645123400"},
		{oidTimestamp, 3, "2024-01-02 03:04:05.123", "1704164645123"},
		{oidTimestamp, 0, "2024-01-02 03:04:05", "1704164645000"},
		{oidTimestamp, 3, "1969-12-31 23:59:59.999", "-1"},
		{oidTime, -1, "03:04:05.123456", "11045123456"},
		{oidTime, 3, "03:04:05.123", "11045123"},
		{oidTime, 0, "03:04:05", "11045000"},
	} {
		conv := newConverter(options{decimal: "precise", time: "adaptive", interval: "numeric", binary: "bytes", hstore: "json"})
		if got := string(conv.appendValue(nil, conv.resolve(c.oid, c.typmod, false), []byte(c.text))); got != c.want {
			t.Errorf("oid %d typmod %d %q: %s, want %s", c.oid, c.typmod, c.text, got, c.want)
		}
	}
}
