package protocol

import (
	"encoding/json"
	"errors"
	"math/big"
	"net"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"
)

// kindsRow has a field of every kind added beside the scalars: decimals,
// arrays, text-form types.
type kindsRow struct {
	ID     string          `tide:"id,pk"`
	Price  Decimal         `tide:"price"`
	Maybe  *Decimal        `tide:"maybe"`
	Tags   []string        `tide:"tags"`
	Ns     []int64         `tide:"ns"`
	Holes  []*int32        `tide:"holes"`
	Us     []uint16        `tide:"us"`
	Fs     []float64       `tide:"fs"`
	Bs     []bool          `tide:"bs"`
	Ts     []time.Time     `tide:"ts"`
	Ds     []Decimal       `tide:"ds"`
	Addr   netip.Addr      `tide:"addr"`
	Net    *netip.Prefix   `tide:"net"`
	Mood   mood            `tide:"mood"`
	Moods  []mood          `tide:"moods"`
	Raw    json.RawMessage `tide:"raw"`
	Stamps []*time.Time    `tide:"stamps"`
}

// mood is a named string type, as an enum column is declared.
type mood string

// textString is a named string type with text methods: it stays a string.
type textString string

func (s textString) MarshalText() ([]byte, error)  { return []byte("x" + s), nil }
func (s *textString) UnmarshalText(b []byte) error { *s = textString(b); return nil }

func TestKindOf(t *testing.T) {
	for _, tc := range []struct {
		typ     reflect.Type
		kind    Kind
		ptr     bool
		elemPtr bool
		err     string // substring of the error; "" for none
	}{
		{typeOf[string](), KindString, false, false, ""},
		{typeOf[mood](), KindString, false, false, ""},
		{typeOf[*mood](), KindString, true, false, ""},
		{typeOf[textString](), KindString, false, false, ""},
		{typeOf[time.Duration](), KindInt, false, false, ""},
		{typeOf[net.IP](), KindText, false, false, ""},
		{typeOf[[]net.IP](), 0, false, false, "an array's elements must be"},
		{typeOf[Decimal](), KindDecimal, false, false, ""},
		{typeOf[*Decimal](), KindDecimal, true, false, ""},
		{typeOf[netip.Addr](), KindText, false, false, ""},
		{typeOf[*netip.Prefix](), KindText, true, false, ""},
		{typeOf[time.Time](), KindTime, false, false, ""},
		{typeOf[[]byte](), KindBytes, false, false, ""},
		{typeOf[json.RawMessage](), KindJSON, false, false, ""},
		{typeOf[[]string](), KindArray | KindString, false, false, ""},
		{typeOf[[]mood](), KindArray | KindString, false, false, ""},
		{typeOf[[]int](), KindArray | KindInt, false, false, ""},
		{typeOf[[]*int64](), KindArray | KindInt, false, true, ""},
		{typeOf[[]uint32](), KindArray | KindUint, false, false, ""},
		{typeOf[[]float32](), KindArray | KindFloat, false, false, ""},
		{typeOf[[]bool](), KindArray | KindBool, false, false, ""},
		{typeOf[[]time.Time](), KindArray | KindTime, false, false, ""},
		{typeOf[[]*time.Time](), KindArray | KindTime, false, true, ""},
		{typeOf[[]Decimal](), KindArray | KindDecimal, false, false, ""},
		{typeOf[[][]int64](), 0, false, false, "multidimensional arrays are not supported"},
		{typeOf[[][2]int64](), 0, false, false, "multidimensional arrays are not supported"},
		{typeOf[[][]byte](), 0, false, false, "an array's elements must be"},
		{typeOf[[]netip.Addr](), 0, false, false, "an array's elements must be"},
		{typeOf[[]map[string]int](), 0, false, false, "an array's elements must be"},
		{typeOf[*[]string](), 0, false, false, "a nil slice is NULL"},
		{typeOf[*json.RawMessage](), 0, false, false, "a nil slice is NULL"},
		{typeOf[map[string]any](), 0, false, false, "protocol.Decimal"},
		{typeOf[complex128](), 0, false, false, "unsupported field type complex128"},
		{typeOf[struct{ A int }](), 0, false, false, "unsupported field type"},
	} {
		k, ptr, elemPtr, err := kindOf(tc.typ)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, ErrUnsupportedType) {
				t.Errorf("kindOf(%s): error %v, want one containing %q and wrapping ErrUnsupportedType", tc.typ, err, tc.err)
			}
			continue
		}
		if err != nil || k != tc.kind || ptr != tc.ptr || elemPtr != tc.elemPtr {
			t.Errorf("kindOf(%s) = %s, %v, %v, %v; want %s, %v, %v", tc.typ, k, ptr, elemPtr, err, tc.kind, tc.ptr, tc.elemPtr)
		}
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{
		KindDecimal: "decimal", KindText: "text", KindArray | KindInt: "[]int",
		KindArray | KindDecimal: "[]decimal", KindArray | KindTime: "[]time",
	} {
		if got := k.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", k, got, want)
		}
		if k.IsArray() && (k.Keyable() || k.Elem().IsArray()) {
			t.Errorf("%s: keyable or nested", k)
		}
	}
}

// TestKeyOfNewKindsRefused: decimals, arrays and text-form types are no key
// or scope column.
func TestKeyOfNewKindsRefused(t *testing.T) {
	type d struct {
		ID Decimal `tide:"id,pk"`
	}
	type a struct {
		ID  string   `tide:"id,pk"`
		Tag []string `tide:"tag,scope"`
	}
	type x struct {
		ID netip.Addr `tide:"id,pk"`
	}
	for _, typ := range []reflect.Type{typeOf[d](), typeOf[a](), typeOf[x]()} {
		if _, err := CodecFor(typ); !errors.Is(err, ErrUnsupportedType) || !strings.Contains(err.Error(), "must be a string, integer or bool") {
			t.Errorf("%s: %v", typ, err)
		}
	}
}

func TestParseDecimal(t *testing.T) {
	for _, s := range []string{"0", "1", "-1", "12.30", "0.000", "-0.5", "123456789012345678901234567890.123456789",
		"NaN", "Infinity", "-Infinity", "9007199254740993"} {
		if d, err := ParseDecimal(s); err != nil || string(d) != s {
			t.Errorf("ParseDecimal(%q) = %q, %v", s, d, err)
		}
	}
	for _, s := range []string{"", "-", "+1", "01", "-0", "-0.00", "1.", ".5", "1e5", "1E5", "0x10", " 1", "1 ", "nan", "inf",
		"-NaN", "+Infinity", "1,5", "1.2.3", "١"} {
		if d, err := ParseDecimal(s); !errors.Is(err, ErrBadDecimal) {
			t.Errorf("ParseDecimal(%q) = %q, %v; want ErrBadDecimal", s, d, err)
		}
	}
	if s := Decimal("").String(); s != "0" {
		t.Errorf("zero Decimal: %q", s)
	}
}

// FuzzParseDecimal: ParseDecimal accepts exactly the texts math/big reads
// as a decimal and prints back unchanged at their scale (plus the three
// special values), and MarshalText and UnmarshalText agree with it.
func FuzzParseDecimal(f *testing.F) {
	for _, s := range []string{"0", "12.30", "-0.5", "-0", "01", "1e5", "NaN", "-Infinity", "0.1", "99999999999999999999.99"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDecimal(s)
		want := s == "NaN" || s == "Infinity" || s == "-Infinity"
		if !want && s != "" && !strings.ContainsAny(s, "eE+_xXpP/") && (s[0] == '-' || s[0] >= '0' && s[0] <= '9') {
			if r, ok := new(big.Rat).SetString(s); ok {
				scale := 0
				if i := strings.IndexByte(s, '.'); i >= 0 {
					scale = len(s) - i - 1
				}
				want = r.FloatString(scale) == s && !(r.Sign() == 0 && s[0] == '-')
			}
		}
		if (err == nil) != want {
			t.Fatalf("ParseDecimal(%q) = %q, %v; want accepted: %v", s, d, err, want)
		}
		var u Decimal
		uerr := u.UnmarshalText([]byte(s))
		b, merr := Decimal(s).MarshalText()
		if (uerr == nil) != want || s != "" && (merr == nil) != want {
			t.Fatalf("%q: UnmarshalText %v, MarshalText %v; ParseDecimal %v", s, uerr, merr, err)
		}
		if want && (string(u) != s || string(b) != s) {
			t.Fatalf("%q: UnmarshalText %q, MarshalText %q", s, u, b)
		}
	})
}

func TestKindsRoundTrip(t *testing.T) {
	n1, n3 := int32(1), int32(-3)
	d := Decimal("-0.000001")
	pfx := netip.MustParsePrefix("10.1.0.0/16")
	at := time.Date(2026, 12, 2, 14, 30, 0, 123456000, time.UTC)
	in := kindsRow{
		ID: "k1", Price: "90071992547409931.30", Maybe: &d,
		Tags: []string{"a", "", `q"uote`, "é"}, Ns: []int64{-9223372036854775808, 0, 9223372036854775807},
		Holes: []*int32{&n1, nil, &n3}, Us: []uint16{0, 65535}, Fs: []float64{0.1, -2.5e-300},
		Bs: []bool{true, false}, Ts: []time.Time{at}, Ds: []Decimal{"0.10", "NaN", "-Infinity"},
		Addr: netip.MustParseAddr("2001:db8::1"), Net: &pfx, Mood: "sad", Moods: []mood{"happy"},
		Raw: json.RawMessage(`[[1,2],[3,4]]`), Stamps: []*time.Time{nil, &at},
	}
	_, row, err := EncodeRow(in)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"id":"k1","price":"90071992547409931.30","maybe":"-0.000001","tags":["a","","q\"uote","é"],` +
		`"ns":[-9223372036854775808,0,9223372036854775807],"holes":[1,null,-3],"us":[0,65535],"fs":[0.1,-2.5e-300],` +
		`"bs":[true,false],"ts":["2026-12-02T14:30:00.123456Z"],"ds":["0.10","NaN","-Infinity"],"addr":"2001:db8::1",` +
		`"net":"10.1.0.0/16","mood":"sad","moods":["happy"],"raw":[[1,2],[3,4]],"stamps":[null,"2026-12-02T14:30:00.123456Z"]}`
	if string(row) != want {
		t.Fatalf("row\n got %s\nwant %s", row, want)
	}
	for _, share := range []bool{false, true} {
		var out kindsRow
		c, _ := CodecFor(typeOf[kindsRow]())
		if err := c.decode(row, valueOf(&out).Elem(), share); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(out, in) {
			t.Fatalf("share=%v: round trip\n got %+v\nwant %+v", share, out, in)
		}
	}
	// Nil slices and pointers are null; empty slices are []; the zero
	// Decimal is 0 and the zero netip.Addr its empty text.
	_, row, err = EncodeRow(kindsRow{ID: "k2", Tags: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	const zero = `{"id":"k2","price":"0","maybe":null,"tags":[],"ns":null,"holes":null,"us":null,"fs":null,"bs":null,` +
		`"ts":null,"ds":null,"addr":"","net":null,"mood":"","moods":null,"raw":null,"stamps":null}`
	if string(row) != zero {
		t.Fatalf("zero row\n got %s\nwant %s", row, zero)
	}
	out, err := DecodeRow[kindsRow](row)
	if err != nil || out.Tags == nil || len(out.Tags) != 0 || out.Ns != nil || out.Price != "0" {
		t.Fatalf("zero row decoded: %+v, %v", out, err)
	}
}

func TestKindsEncodeErrors(t *testing.T) {
	at := time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		row  kindsRow
		want string
	}{
		{kindsRow{Price: "1e5"}, "column price: not a canonical decimal"},
		{kindsRow{Ds: []Decimal{"1", "01"}}, "column ds: element 1: not a canonical decimal"},
		{kindsRow{Ts: []time.Time{at}}, "column ts: element 0: year -1"},
		{kindsRow{Fs: []float64{1, 0 * 0}}, ""},
	} {
		_, _, err := EncodeRow(tc.row)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%+v: %v", tc.row, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("encode: %v, want %q", err, tc.want)
		}
	}
}

// TestKindsDecodeErrors: values a field cannot hold are errors naming the
// column, never a panic.
func TestKindsDecodeErrors(t *testing.T) {
	for _, row := range []string{
		`{"price":12.30}`, `{"price":"1e5"}`, `{"maybe":"-0"}`, `{"tags":"a"}`, `{"ns":[1.5]}`, `{"ns":[[1]]}`,
		`{"us":[-1]}`, `{"us":[70000]}`, `{"ds":[0.1]}`, `{"ts":["yesterday"]}`, `{"addr":"300.1.1.1"}`, `{"addr":7}`,
		`{"net":"10.0.0.1"}`, `{"bs":[1]}`,
	} {
		var out kindsRow
		err := (func() error {
			c, _ := CodecFor(typeOf[kindsRow]())
			return c.Decode([]byte(row), valueOf(&out).Elem())
		})()
		if err == nil || !strings.Contains(err.Error(), "tide: column ") {
			t.Errorf("%s: %v", row, err)
		}
	}
}

// FuzzDecodeRowKinds: for rows of the new kinds too, wherever the fast row
// decoder answers, it agrees with the encoding/json path.
func FuzzDecodeRowKinds(f *testing.F) {
	for _, s := range []string{
		`{"id":"k1","price":"12.30","maybe":"-0.5","tags":["a"],"ns":[1,2],"addr":"10.0.0.1","net":"10.0.0.0/8","mood":"x","ds":["NaN"]}`,
		`{"price":"01","maybe":null,"addr":"::1","net":null}`, `{"price":"1\u0030"}`, `{"addr":"1.2.3.4\u0000"}`,
		`{"tags":[ "a" , "" ],"ns":[],"holes":[1,null,-3],"us":[65535,0],"fs":[0.1,-2e-300,1E5],"bs":[true, false],"ts":["2026-12-02T14:30:00.123456Z"],"ds":["0.10",null,"NaN"],"moods":["x"],"stamps":[null,"2026-12-02T14:30:00Z"]}`,
		`{"tags":null,"ns":[1.5],"us":[-1],"holes":[2147483648],"bs":[null],"ds":["01"],"tags":["a\n"]}`, `{"ns":[[1]],"ts":[1]}`, `{"ns":[1,]}`, `{"ns":[1 2]}`,
	} {
		f.Add([]byte(s))
	}
	c, err := CodecFor(typeOf[kindsRow]())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast kindsRow
		if !c.decodeFast(data, valueOf(&fast).Elem(), false) {
			return
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(data, &obj); err != nil {
			t.Fatalf("fast path accepted %q, encoding/json refuses it: %v", data, err)
		}
		var slow kindsRow
		sv := valueOf(&slow).Elem()
		for _, fc := range c.fields {
			if raw, ok := obj[fc.col.Name]; ok {
				if err := json.Unmarshal(raw, sv.Field(fc.field).Addr().Interface()); err != nil {
					t.Fatalf("fast path accepted %q, encoding/json refuses column %s: %v", data, fc.col.Name, err)
				}
			}
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q:\nfast %+v\nslow %+v", data, fast, slow)
		}
	})
}

// TestDecodeFastArrays: rows with arrays, decimals and text-form values
// decode on the fast path (without encoding/json), into what the slow
// path gives.
func TestDecodeFastArrays(t *testing.T) {
	c, err := CodecFor(typeOf[kindsRow]())
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{
		`{"id":"k1","price":"12.30","maybe":"-0.5","tags":["a",""],"ns":[1,-2],"holes":[null,3],"us":[],"fs":[0.1],"bs":[true],` +
			`"ts":["2026-12-02T14:30:00.123456Z"],"ds":["NaN",null],"addr":"10.0.0.1","net":"10.0.0.0/8","mood":"m","moods":["a"],"raw":[1],"stamps":[null]}`,
		`{"tags":null,"ns":[ 1 , 2 ],"ds":[]}`,
	} {
		var fast, slow kindsRow
		if !c.decodeFast([]byte(row), valueOf(&fast).Elem(), false) {
			t.Fatalf("the fast path refused %s", row)
		}
		if err := json.Unmarshal([]byte(row), &struct{}{}); err != nil {
			t.Fatal(err)
		}
		var obj map[string]json.RawMessage
		_ = json.Unmarshal([]byte(row), &obj)
		sv := valueOf(&slow).Elem()
		for _, fc := range c.fields {
			if raw, ok := obj[fc.col.Name]; ok {
				if err := json.Unmarshal(raw, sv.Field(fc.field).Addr().Interface()); err != nil {
					t.Fatal(err)
				}
			}
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%s:\nfast %+v\nslow %+v", row, fast, slow)
		}
	}
}
