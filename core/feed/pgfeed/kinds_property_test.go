package pgfeed_test

import (
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/internal/testenv"
)

// kindMood is a named string type for an enum column.
type kindMood string

// kindRow declares a column of every value kind beyond the plain scalars:
// decimals (on numeric, a numeric domain and bigint), arrays of each
// element kind, NULL elements included, enums and their arrays, domains,
// uuid, inet and cidr (as strings and as netip types, which implement
// encoding.TextMarshaler), intervals and timestamptz.
type kindRow struct {
	ID     string              `tide:"id,pk"`
	Dec    *protocol.Decimal   `tide:"dec"`
	Money  *protocol.Decimal   `tide:"money"`
	BigDec *protocol.Decimal   `tide:"bigdec"`
	Tags   []*string           `tide:"tags"`
	Ns     []*int64            `tide:"ns"`
	I4s    []int32             `tide:"i4s"`
	Fs     []float64           `tide:"fs"`
	Bs     []bool              `tide:"bs"`
	Ts     []*time.Time        `tide:"ts"`
	Days   []time.Time         `tide:"days"`
	Ds     []*protocol.Decimal `tide:"ds"`
	Mood   *kindMood           `tide:"mood"`
	Moods  []kindMood          `tide:"moods"`
	UID    *string             `tide:"uid"`
	Host   *netip.Addr         `tide:"host"`
	Addr   *string             `tide:"addr"`
	Net    *netip.Prefix       `tide:"net"`
	Dur    *string             `tide:"dur"`
	At     *time.Time          `tide:"at"`
	Pos    *int64              `tide:"pos"`
	Label  *string             `tide:"label"`
}

// kindCols are kindRow's columns in field order after id: the SQL type and
// a generator of a value as Postgres text input.
var kindCols = []struct {
	name, typ string
	gen       func(r *rand.Rand) string
}{
	{"dec", "numeric", randDecimal},
	{"money", "kinds_money", func(r *rand.Rand) string {
		return strconv.FormatInt(r.Int64N(2e12)-1e12, 10) + "." + strconv.Itoa(r.IntN(100))
	}},
	{"bigdec", "bigint", randInt64},
	{"tags", "text[]", func(r *rand.Rand) string { return randArray(r, quoteElem(randText)) }},
	{"ns", "bigint[]", func(r *rand.Rand) string { return randArray(r, randInt64) }},
	{"i4s", "integer[]", func(r *rand.Rand) string {
		return randArrayNoNull(r, func(r *rand.Rand) string { return strconv.Itoa(int(int32(r.Uint32()))) })
	}},
	{"fs", "double precision[]", func(r *rand.Rand) string { return randArrayNoNull(r, randFiniteFloat) }},
	{"bs", "boolean[]", func(r *rand.Rand) string {
		return randArrayNoNull(r, func(r *rand.Rand) string { return strconv.FormatBool(r.IntN(2) == 0) })
	}},
	{"ts", "timestamptz[]", func(r *rand.Rand) string { return randArray(r, quoteElem(randFiniteTime)) }},
	{"days", "date[]", func(r *rand.Rand) string {
		return randArrayNoNull(r, func(r *rand.Rand) string { return strings.Fields(randFiniteTime(r))[0] })
	}},
	{"ds", "numeric[]", func(r *rand.Rand) string { return randArray(r, randDecimal) }},
	{"mood", "kinds_mood", randMood},
	{"moods", "kinds_mood[]", func(r *rand.Rand) string { return randArrayNoNull(r, quoteElem(randMood)) }},
	{"uid", "uuid", func(r *rand.Rand) string {
		var b [16]byte
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		return hex.EncodeToString(b[:])
	}},
	{"host", "inet", func(r *rand.Rand) string { return randAddr(r, false) }},
	{"addr", "inet", func(r *rand.Rand) string { return randAddr(r, true) }},
	{"net", "cidr", func(r *rand.Rand) string {
		p, err := netip.ParsePrefix(randAddr(r, true))
		if err != nil {
			return "10.0.0.0/8"
		}
		return p.Masked().String()
	}},
	{"dur", "interval", func(r *rand.Rand) string {
		return fmt.Sprintf("%d years %d mons %d days %d:%02d:%02d.%06d", r.IntN(5)-2, r.IntN(30)-15, r.IntN(80)-40, r.IntN(50)-25, r.IntN(60), r.IntN(60), r.IntN(1e6))
	}},
	{"at", "timestamptz", randFiniteTime},
	{"pos", "kinds_pos", func(r *rand.Rand) string { return strconv.FormatInt(1+r.Int64N(math.MaxInt64-1), 10) }},
	{"label", "kinds_label", randText},
}

func randDecimal(r *rand.Rand) string {
	switch r.IntN(12) {
	case 0:
		return []string{"NaN", "Infinity", "-Infinity"}[r.IntN(3)]
	case 1:
		return "-0.000" // no negative zero: 0.000
	case 2:
		return "0.1"
	case 3: // beyond 2^53, with a scale
		return "9007199254740993." + strconv.Itoa(r.IntN(100))
	}
	var b strings.Builder
	if r.IntN(2) == 0 {
		b.WriteByte('-')
	}
	for range 1 + r.IntN(40) {
		b.WriteByte(byte('0' + r.IntN(10)))
	}
	if r.IntN(3) > 0 {
		b.WriteByte('.')
		for range 1 + r.IntN(20) {
			b.WriteByte(byte('0' + r.IntN(10)))
		}
	}
	return b.String() // leading zeros too, which Postgres drops
}

// randFiniteFloat is randFloat without NaN, infinities and -0, which a
// float's JSON number cannot carry (docs/protocol.md: -0 arrives as 0).
func randFiniteFloat(r *rand.Rand) string {
	for {
		if s := randFloat(r); s != "NaN" && s != "Infinity" && s != "-0" {
			return s
		}
	}
}

func randFiniteTime(r *rand.Rand) string {
	for {
		if s := randTime(r); s != "infinity" {
			return s
		}
	}
}

func randMood(r *rand.Rand) string {
	return []string{"happy", `sad "quoted"`, "", "NULL", "a,b {c}"}[r.IntN(5)]
}

func randAddr(r *rand.Rand, masked bool) string {
	var a netip.Addr
	bits := 32
	if r.IntN(3) == 0 {
		var b [16]byte
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		b[0] = 0x20 // no IPv4-mapped forms
		a, bits = netip.AddrFrom16(b), 128
	} else {
		a = netip.AddrFrom4([4]byte{byte(r.IntN(256)), byte(r.IntN(256)), byte(r.IntN(256)), byte(r.IntN(256))})
	}
	if !masked {
		return a.String()
	}
	return a.String() + "/" + strconv.Itoa(r.IntN(bits+1))
}

// quoteElem makes gen's values array elements: double-quoted, escaped.
func quoteElem(gen func(*rand.Rand) string) func(*rand.Rand) string {
	return func(r *rand.Rand) string {
		return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(gen(r)) + `"`
	}
}

func randArray(r *rand.Rand, gen func(*rand.Rand) string) string {
	el := make([]string, r.IntN(5))
	for i := range el {
		if r.IntN(5) == 0 {
			el[i] = "NULL"
		} else {
			el[i] = gen(r)
		}
	}
	return "{" + strings.Join(el, ",") + "}"
}

func randArrayNoNull(r *rand.Rand, gen func(*rand.Rand) string) string {
	el := make([]string, r.IntN(5))
	for i := range el {
		el[i] = gen(r)
	}
	return "{" + strings.Join(el, ",") + "}"
}

// kindsSabotage, when set, renders decoded decimals back through a float64,
// as a float path would: TestKindsMatchPostgresText must then fail.
var kindsSabotage = os.Getenv("TIDE_KINDS_SABOTAGE") != ""

// TestKindsMatchPostgresText: random rows of every value kind, written by
// plain SQL INSERTs, reach a Go app through the capture and replay and
// through a snapshot as values that render back byte for byte as what
// Postgres prints for each column (its type's output, value::text but for
// inet and cidr, in a session with TimeZone UTC). TIDE_KINDS_SABOTAGE=1 makes the comparison see decimals through a
// float, and the test fail.
func TestKindsMatchPostgresText(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(seedOf(t), 2))
	pool, name := testenv.PostgresSchema(t)
	ctx := testCtx(t)
	codec, err := protocol.CodecFor(reflect.TypeFor[kindRow]())
	if err != nil {
		t.Fatal(err)
	}
	schema := &feed.Schema{Name: "kinds", Table: "kinds", Columns: codec.Columns(), Keys: codec.Keys()}
	exec2(t, pool, `CREATE TYPE kinds_mood AS ENUM ('happy', 'sad "quoted"', '', 'NULL', 'a,b {c}')`)
	exec2(t, pool, `CREATE DOMAIN kinds_money AS numeric(14,2)`)
	exec2(t, pool, `CREATE DOMAIN kinds_pos AS bigint CHECK (VALUE > 0)`)
	exec2(t, pool, `CREATE DOMAIN kinds_label AS text`)
	defs := []string{"id text PRIMARY KEY"}
	for _, c := range kindCols {
		defs = append(defs, c.name+" "+c.typ)
	}
	exec2(t, pool, "CREATE TABLE kinds ("+strings.Join(defs, ", ")+")")
	f := migrated(t, pool, name, pgfeed.Options{}, schema)

	const rows = 200
	for i := range rows {
		args := []any{fmt.Sprintf("r%03d", i)}
		ps := []string{"$1"}
		for _, c := range kindCols {
			var v any // NULL
			if rng.IntN(8) > 0 {
				v = c.gen(rng)
			}
			args = append(args, v)
			ps = append(ps, "$"+strconv.Itoa(len(args))+"::text::"+c.typ)
		}
		if _, err := pool.Exec(ctx, "INSERT INTO kinds VALUES ("+strings.Join(ps, ", ")+")", args...); err != nil {
			t.Fatalf("insert %q: %v", args, err)
		}
		if i%4 == 0 { // some rows updated by SQL too
			c := kindCols[rng.IntN(len(kindCols))]
			if _, err := pool.Exec(ctx, "UPDATE kinds SET "+c.name+" = $2::text::"+c.typ+" WHERE id = $1", args[0], c.gen(rng)); err != nil {
				t.Fatal(err)
			}
		}
	}

	// What Postgres prints for each column, NULL as nil.
	want := map[string][]*string{}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	exec2(t, conn, "SET TimeZone = 'UTC'")
	sel := []string{"id"}
	for _, c := range kindCols {
		// The type's output, as ::text is for all but inet and cidr,
		// whose cast to text always has a netmask.
		sel = append(sel, "CASE WHEN "+c.name+" IS NULL THEN NULL ELSE format('%s', "+c.name+") END")
	}
	rs, err := conn.Query(ctx, "SELECT "+strings.Join(sel, ", ")+" FROM kinds")
	if err != nil {
		t.Fatal(err)
	}
	for rs.Next() {
		vals := make([]*string, len(kindCols)+1)
		ptrs := make([]any, len(vals))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rs.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		for i, c := range kindCols {
			if c.typ == "double precision[]" && vals[i+1] != nil {
				vals[i+1] = canonFloats(t, *vals[i+1])
			}
		}
		want[*vals[0]] = vals[1:]
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}

	check := func(what string, key string, row []byte) {
		t.Helper()
		var v kindRow
		if err := codec.Decode(row, reflect.ValueOf(&v).Elem()); err != nil {
			t.Fatalf("%s: row %s: decode %s: %v", what, key, row, err)
		}
		w, ok := want[key]
		if !ok {
			t.Fatalf("%s: row %s is not in the table", what, key)
		}
		rv := reflect.ValueOf(v)
		for i, c := range kindCols {
			got := pgText(rv.Field(i+1).Interface(), strings.HasPrefix(c.typ, "date"))
			if (got == nil) != (w[i] == nil) || got != nil && *got != *w[i] {
				t.Fatalf("%s: row %s column %s (%s): decoded value renders as %s, Postgres prints %s\nrow %s", what, key, c.name, c.typ, show(got), show(w[i]), row)
			}
		}
	}
	sc := feed.NewScope(schema, nil)
	latest := map[string]feed.Change{}
	for _, c := range replayAll(t, f, sc, 0, head(t, f)) {
		latest[c.Key] = c
	}
	if len(latest) != rows {
		t.Fatalf("replay: %d rows, want %d", len(latest), rows)
	}
	for k, c := range latest {
		check("replay", k, c.Row)
	}
	n := 0
	q := feed.SnapshotQuery{Scope: sc, Limit: 64}
	for {
		pg, err := f.Snapshot(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range pg.Rows {
			check("snapshot", r.Key, r.Row)
			n++
		}
		if len(pg.Rows) < q.Limit {
			break
		}
		q.After, q.HasAfter = pg.Rows[len(pg.Rows)-1].Key, true
	}
	if n != rows {
		t.Fatalf("snapshot: %d rows, want %d", n, rows)
	}
}

func show(s *string) string {
	if s == nil {
		return "NULL"
	}
	return strconv.Quote(*s)
}

// pgText renders a decoded field value as Postgres's text output of its
// column prints it (nil for NULL), in a session with TimeZone UTC and the
// default DateStyle, IntervalStyle and extra_float_digits. date: the
// column is of dates, whose times print as dates.
func pgText(v any, date bool) *string {
	s := func(x string) *string { return &x }
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer || rv.Kind() == reflect.Slice {
		if rv.IsNil() {
			return nil
		}
	}
	if rv.Kind() == reflect.Slice {
		el := make([]string, rv.Len())
		for i := range el {
			e := pgText(rv.Index(i).Interface(), date)
			if e == nil {
				el[i] = "NULL"
			} else {
				el[i] = arrayElem(*e)
			}
		}
		return s("{" + strings.Join(el, ",") + "}")
	}
	if rv.Kind() == reflect.Pointer {
		return pgText(rv.Elem().Interface(), date)
	}
	switch x := v.(type) {
	case protocol.Decimal:
		if kindsSabotage {
			if f, err := strconv.ParseFloat(string(x), 64); err == nil {
				return s(strconv.FormatFloat(f, 'f', -1, 64))
			}
		}
		return s(x.String())
	case time.Time:
		if date {
			return s(x.Format("2006-01-02"))
		}
		return s(x.UTC().Format("2006-01-02 15:04:05.999999-07"))
	case float64:
		return s(pgFloat(x))
	case int64:
		return s(strconv.FormatInt(x, 10))
	case int32:
		return s(strconv.FormatInt(int64(x), 10))
	case bool:
		if x {
			return s("t")
		}
		return s("f")
	case string:
		return s(x)
	case kindMood:
		return s(string(x))
	case netip.Addr:
		return s(x.String())
	case netip.Prefix:
		return s(x.String())
	}
	panic(fmt.Sprintf("pgText: %T", v))
}

// arrayElem quotes an array element as Postgres's array output does.
func arrayElem(e string) string {
	if e != "" && !strings.EqualFold(e, "NULL") && !strings.ContainsAny(e, "{},\"\\ \t\n\r\v\f") {
		return e
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(e) + `"`
}

// canonFloats renders the elements of Postgres's text of a float8 array
// (no NULL elements) as pgFloat renders their doubles. The shortest digits
// that read back as a double are not always unique: when a shorter string
// lies exactly halfway to the next double (and rounding to even reads it
// as this one), Go writes it and Postgres one digit more, so
// 4.6289772386193916e+19 and 4.628977238619392e+19 are the same double.
// Elements are compared as doubles, through one rendering; any other
// value still differs.
func canonFloats(t testing.TB, text string) *string {
	inner, ok1 := strings.CutPrefix(text, "{")
	inner, ok2 := strings.CutSuffix(inner, "}")
	if !ok1 || !ok2 {
		t.Fatalf("float8[] text %q", text)
	}
	if inner == "" {
		return &text
	}
	el := strings.Split(inner, ",")
	for i, e := range el {
		f, err := strconv.ParseFloat(e, 64)
		if err != nil {
			t.Fatalf("float8[] text %q: element %q: %v", text, e, err)
		}
		el[i] = pgFloat(f)
	}
	out := "{" + strings.Join(el, ",") + "}"
	return &out
}

// pgFloat is float8's text output (shortest exact digits, extra_float_digits
// = 1): fixed notation for decimal exponents from -4 to 14, else d.ddde±XX.
func pgFloat(x float64) string {
	if x == 0 {
		if math.Signbit(x) {
			return "-0"
		}
		return "0"
	}
	e := strconv.FormatFloat(x, 'e', -1, 64) // -d.ddde±XX
	_, exps, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(exps)
	if exp < -4 || exp >= 15 {
		return e
	}
	return strconv.FormatFloat(x, 'f', -1, 64)
}
