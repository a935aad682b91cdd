package postgres_test

// The differential test's workload: tables of every column type Debezium's
// PostgreSQL connector documents, with edge values, captured by a snapshot
// and then streamed through every kind of change.

// workloadTables are the captured tables; the last is the end marker,
// written to after everything else.
var workloadTables = []string{"num", "chars", "times", "misc", "geo", "gis", "arrays", "toast", "toast_full", "pk", "evolving", "trunc", "zz_end"}

var workloadSchema = []string{
	`CREATE EXTENSION IF NOT EXISTS hstore`,
	`CREATE EXTENSION IF NOT EXISTS ltree`,
	`CREATE EXTENSION IF NOT EXISTS citext`,
	`CREATE EXTENSION IF NOT EXISTS isn`,
	`CREATE EXTENSION IF NOT EXISTS postgis`,
	`CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')`,
	`CREATE DOMAIN posint AS int CHECK (VALUE > 0)`,
	`CREATE TABLE num (id serial PRIMARY KEY, b boolean, i2 smallint, i4 integer, i8 bigint, f4 real, f8 double precision,
		n numeric, n10_2 numeric(10,2), n5 numeric(5), m money, o oid, s2 smallserial, s8 bigserial, d posint)`,
	`CREATE TABLE chars (id int PRIMARY KEY, c char(5), vc varchar(10), t text, ct citext, u uuid, j json, jb jsonb, x xml,
		e mood, bits1 bit(1), bits bit(12), vbits varbit, h hstore, lt ltree)`,
	`CREATE TABLE times (id int PRIMARY KEY, d date, t0 time(0), t3 time(3), t6 time, tz timetz, tz3 timetz(3),
		ts0 timestamp(0), ts1 timestamp(1), ts3 timestamp(3), ts4 timestamp(4), ts6 timestamp, tstz timestamptz, tstz0 timestamptz(0),
		iv interval, iv3 interval(3))`,
	`CREATE TABLE misc (id int PRIMARY KEY, inet_ inet, cidr_ cidr, mac macaddr, mac8 macaddr8, r4 int4range, r8 int8range,
		rn numrange, rts tsrange, rtstz tstzrange, rd daterange, raw bytea, tv tsvector, pt point)`,
	`CREATE TABLE geo (id int PRIMARY KEY, bx box, ls lseg, po path, pc path, pg polygon, ci circle, li line, isbn_ isbn13, isbn10 isbn,
		tq tsquery, lsn pg_lsn, snap txid_snapshot, am money[], ai interval[], ax xml[], an name[], ap point[], av varbit[], ao oid[], ac cidr[])`,
	`CREATE TABLE gis (id int PRIMARY KEY, g geometry, gp geometry(Point, 4326), gg geography(Point, 4326), gl geometry(LineString), ga geometry[])`,
	`CREATE TABLE arrays (id int PRIMARY KEY, ai int[], ai8 bigint[], at text[], avc varchar[], ab boolean[], an numeric[],
		af float8[], ad date[], au uuid[], ats timestamptz[], ajb jsonb[], aby bytea[], a2 int[][])`,
	`CREATE TABLE toast (id int PRIMARY KEY, note text, big text, raw bytea, ai int[], at text[], h hstore, j jsonb)`,
	`CREATE TABLE toast_full (id int PRIMARY KEY, note text, big text, raw bytea, ai int[])`,
	`ALTER TABLE toast_full REPLICA IDENTITY FULL`,
	`CREATE TABLE pk (a int, b text, note text, PRIMARY KEY (a, b))`,
	`CREATE TABLE evolving (id int PRIMARY KEY, v text)`,
	`CREATE TABLE trunc (id int PRIMARY KEY, v text)`,
	`CREATE TABLE zz_end (id int PRIMARY KEY, v int)`,
	`CREATE TABLE dbz_signal (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048))`,
}

// big is a value PostgreSQL stores out of line (TOASTed): long and not
// compressible below the threshold.
const big = `(SELECT string_agg(md5(i::text), '') FROM generate_series(1, 400) i)`
const bigBytes = `(SELECT string_agg(decode(md5(i::text), 'hex'), ''::bytea) FROM generate_series(1, 400) i)`
const bigArray = `(SELECT array_agg(i) FROM generate_series(1, 3000) i)`
const bigTextArray = `(SELECT array_agg(md5(i::text)) FROM generate_series(1, 400) i)`

var workloadSnapshot = []string{
	`INSERT INTO num (b, i2, i4, i8, f4, f8, n, n10_2, n5, m, o, d) VALUES
		(true, -32768, -2147483648, -9223372036854775808, 1.5, 0.1, 0, 12345678.90, 99999, 12.34, 0, 1),
		(false, 32767, 2147483647, 9223372036854775807, 3.4e38, 1.7976931348623157e308, -123.456789012345678901234567890, -0.01, -1, -92233720368547758.08, 4294967295, 2147483647),
		(NULL, NULL, NULL, NULL, 'NaN', 'NaN', 'NaN', 'NaN', NULL, NULL, NULL, NULL),
		(NULL, 0, 0, 0, 'Infinity', '-Infinity', 1e-20, 0.5, 0, 0, NULL, NULL),
		(NULL, 1, 1, 1, -1.25e-10, 5e-324, 100000000000000000000000000000000000001, 1.00, 12345, 1000000, NULL, NULL)`,
	`INSERT INTO chars VALUES
		(1, 'ab', 'héllo', 'text with "quotes", \ and /', 'MiXeD', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"a": [1, 2.50, null]}', '{"b": {"c": true}}', '<a>x</a>',
			'happy', B'1', B'101010101010', B'1101', 'a=>1, "b c"=>NULL', 'top.middle.bottom'),
		(2, NULL, '', E'tab\there\nnew\rline\bback\ffeed\u0001\u001f', NULL, NULL, '[]', '[]', NULL, 'sad', B'0', B'000000000001', B'', '', 'a'),
		(3, 'abcde', 'emoji 😀', E'\u2028 and \u00e9 and \u007f', 'x', '00000000-0000-0000-0000-000000000000', 'null', '"s"', '<r/>', NULL, NULL, NULL, NULL, NULL, NULL)`,
	`INSERT INTO times VALUES
		(1, '2024-02-29', '12:34:56', '12:34:56.789', '12:34:56.789012', '12:34:56.789+02', '01:02:03.456-05:30',
			'2024-01-02 03:04:05', '2024-01-02 03:04:05.6', '2024-01-02 03:04:05.678', '2024-01-02 03:04:05.6789', '2024-01-02 03:04:05.678901',
			'2024-01-02 03:04:05.678901+01', '2024-01-02 03:04:05+00', '1 year 2 months 3 days 04:05:06.789', '-1 day 00:00:00.001'),
		(2, '0001-01-01', '00:00:00', '23:59:59.999', '24:00:00', '00:00:00+00', '24:00:00-01',
			'0001-01-01 00:00:00', '1969-12-31 23:59:59.9', '1677-09-21 00:12:43.145', '2262-04-11 23:47:16.855', '9999-12-31 23:59:59.999999',
			'0001-01-01 00:00:00+00', '1970-01-01 00:00:00+00', '0', '-178000000 years'),
		(3, '9999-12-31', NULL, NULL, NULL, NULL, NULL, 'infinity', '-infinity', 'infinity', NULL, '-infinity',
			'infinity', '-infinity', '178000000 years', '1 mon -1 day'),
		(4, 'infinity', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, '36 hours 0.5 seconds', '1 week'),
		(5, '-infinity', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
		(6, '1969-12-31', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
		(7, '0044-03-15 BC', NULL, NULL, NULL, NULL, NULL, '0044-03-15 12:00:00 BC', NULL, NULL, NULL, NULL, '0044-03-15 12:00:00+00 BC', NULL, NULL, NULL),
		(8, '1000-01-01', NULL, NULL, NULL, NULL, NULL, '1000-01-01 00:00:00', NULL, NULL, NULL, NULL, '1000-01-01 00:00:00+00', NULL, NULL, NULL),
		(9, '1582-10-14', NULL, NULL, NULL, '23:59:59.999999-12', '00:00:00.5+14', NULL, NULL, NULL, NULL, '1582-10-15 00:00:00', NULL, NULL, '-5 years -3 months', NULL),
		(10, '1582-10-15', '13:00:00', '13:00:00.001', '13:00:00.000001', NULL, NULL, NULL, NULL, NULL, NULL, NULL, '10000-01-01 00:00:00+00', '2024-06-30 23:59:59.5+00', NULL, NULL)`,
	`INSERT INTO misc VALUES
		(1, '192.168.0.1/24', '10.0.0.0/8', '08:00:2b:01:02:03', '08:00:2b:01:02:03:04:05', '[1,10)', '(,5]', '[1.5,2.5]',
			'[2024-01-01 00:00,2024-01-02 00:00)', '[2024-01-01 00:00+00,)', '[2024-01-01,2024-02-01)', '\x00ff10', 'a fat cat', '(1.5,-2)'),
		(2, '::1', '2001:db8::/32', NULL, NULL, 'empty', NULL, NULL, NULL, NULL, NULL, '\x', NULL, NULL)`,
	`INSERT INTO geo VALUES
		(1, '((1,2),(3,4))', '[(0,0),(1.5,2.5)]', '[(0,0),(1,1),(2,0)]', '((0,0),(1,1),(2,0))', '((0,0),(0,1),(1,1),(1,0))', '<(1,2),3.5>', '{1,-1,0}', '978-0-306-40615-7', '0-306-40615-2',
			'fat & rat', '16/B374D848', '10:20:10,14,15', '{$1.50}', '{"1 day"}', '{<a/>}', '{x}', '{"(1,2)"}', '{101}', '{1,2}', '{10.0.0.0/8}'),
		(2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)`,
	`INSERT INTO gis VALUES
		(1, 'POLYGON((0 0,0 1,1 1,1 0,0 0))', 'SRID=4326;POINT(13.4 52.5)', 'SRID=4326;POINT(-122.4 37.8)', 'LINESTRING(0 0,1 1,2 0)',
			ARRAY['POINT(1 2)'::geometry, 'SRID=3857;POINT(3 4)'::geometry]),
		(2, 'GEOMETRYCOLLECTION EMPTY', NULL, NULL, NULL, '{}'),
		(3, NULL, NULL, NULL, NULL, NULL)`,
	`INSERT INTO arrays VALUES
		(1, '{10,20,NULL}', '{-9223372036854775808}', '{"a","b,c","d\"e",NULL,"NULL",""}', '{x}', '{t,f,NULL}', '{1.5,NaN,-0.01}',
			'{1.5,NaN,Infinity}', '{2024-02-29,infinity}', '{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}', '{"2024-01-02 03:04:05+00"}',
			ARRAY['{"a":1}'::jsonb], ARRAY['\x01'::bytea, NULL], '{{1,2},{3,4}}'),
		(2, '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}'),
		(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
		(4, '{1}', NULL, '{"\\x","{}"}', NULL, NULL, '{1.5,-0.01,100}', '{-0.0,1e-5,123456789}', '{0044-03-15 BC,1000-01-01,1582-10-15,-infinity}', NULL,
			'{infinity,"0044-03-15 12:00:00+00 BC"}', NULL, NULL, '[0:1]={7,8}')`,
	`INSERT INTO toast VALUES (1, 'one', ` + big + `, ` + bigBytes + `, ` + bigArray + `, ` + bigTextArray + `, hstore(` + bigTextArray + `, ` + bigTextArray + `), to_jsonb(` + bigTextArray + `))`,
	`INSERT INTO toast_full VALUES (1, 'one', ` + big + `, ` + bigBytes + `, ` + bigArray + `)`,
	`INSERT INTO pk VALUES (1, 'x', 'first'), (2, E'ctl\u0001\u001f\b\f"\\/ é', 'control characters')`,
	`INSERT INTO evolving VALUES (1, 'before')`,
	`INSERT INTO trunc VALUES (1, 'a'), (2, 'b')`,
	`INSERT INTO zz_end VALUES (1, 0)`,
}

// workloadStream are the statements run once both sides stream, one
// transaction each unless they say otherwise.
var workloadStream = []string{
	// Every value again, streamed: the snapshot's rows copied under new keys.
	`INSERT INTO num (b, i2, i4, i8, f4, f8, n, n10_2, n5, m, o, d) SELECT b, i2, i4, i8, f4, f8, n, n10_2, n5, m, o, d FROM num ORDER BY id`,
	`INSERT INTO chars SELECT id + 100, c, vc, t, ct, u, j, jb, x, e, bits1, bits, vbits, h, lt FROM chars ORDER BY id`,
	`INSERT INTO times SELECT id + 100, d, t0, t3, t6, tz, tz3, ts0, ts1, ts3, ts4, ts6, tstz, tstz0, iv, iv3 FROM times ORDER BY id`,
	`INSERT INTO misc SELECT id + 100, inet_, cidr_, mac, mac8, r4, r8, rn, rts, rtstz, rd, raw, tv, pt FROM misc ORDER BY id`,
	`INSERT INTO geo SELECT id + 100, bx, ls, po, pc, pg, ci, li, isbn_, isbn10, tq, lsn, snap, am, ai, ax, an, ap, av, ao, ac FROM geo ORDER BY id`,
	`INSERT INTO gis SELECT id + 100, g, gp, gg, gl, ga FROM gis ORDER BY id`,
	`INSERT INTO arrays SELECT id + 100, ai, ai8, at, avc, ab, an, af, ad, au, ats, ajb, aby, a2 FROM arrays ORDER BY id`,
	// Updates and deletes under REPLICA IDENTITY DEFAULT.
	`UPDATE num SET i4 = i4 / 2, n10_2 = 1.23 WHERE id = 1`,
	`UPDATE chars SET t = 'changed', h = 'k=>v' WHERE id = 1`,
	`DELETE FROM times WHERE id = 2`,
	// Unchanged TOASTed values: under DEFAULT, the placeholders; under FULL,
	// the old row's values.
	`UPDATE toast SET note = 'two' WHERE id = 1`,
	`UPDATE toast_full SET note = 'two' WHERE id = 1`,
	`UPDATE toast_full SET id = 2 WHERE id = 1`,
	`DELETE FROM toast_full WHERE id = 2`,
	`UPDATE toast SET id = 2 WHERE id = 1`,
	// Primary-key changes, and keys with control characters.
	`UPDATE pk SET a = 3 WHERE a = 1`,
	`UPDATE pk SET b = E'new\u0002key' WHERE a = 2`,
	`DELETE FROM pk WHERE a = 3`,
	// A transaction of several statements over several tables.
	`BEGIN; INSERT INTO pk VALUES (10, 'tx', 'one'); UPDATE pk SET note = 'two' WHERE a = 10; INSERT INTO trunc VALUES (3, 'c');
		DELETE FROM pk WHERE a = 10; COMMIT`,
	// The schema changes mid-stream.
	`ALTER TABLE evolving ADD COLUMN added numeric(6,3) DEFAULT 1.5`,
	`INSERT INTO evolving VALUES (2, 'after add', 2.25)`,
	`UPDATE evolving SET v = 'updated' WHERE id = 1`,
	`ALTER TABLE evolving DROP COLUMN v`,
	`INSERT INTO evolving VALUES (3, 3.125)`,
	`ALTER TABLE evolving ALTER COLUMN added TYPE text`,
	`INSERT INTO evolving VALUES (4, 'text now')`,
	// A truncate, then rows again.
	`TRUNCATE trunc`,
	`INSERT INTO trunc VALUES (4, 'd')`,
	`UPDATE zz_end SET v = 1`, // the end marker: an update, which no variant skips
}
