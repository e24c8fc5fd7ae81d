package protocol

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

type goodRow struct {
	ID        string          `tide:"id,pk"`
	ProjectID string          `tide:"project_id,scope"`
	Owner     int64           `tide:"owner,scope"`
	Title     string          `tide:"title"`
	Done      bool            `tide:"done"`
	Score     float64         `tide:"score"`
	At        time.Time       `tide:"at"`
	Note      *string         `tide:"note"`
	Blob      []byte          `tide:"blob"`
	Meta      json.RawMessage `tide:"meta"`
	Count     *uint16         `tide:"count"`
	Ignored   string
	Skipped   string `tide:"-"`
}

func typeOf[T any]() reflect.Type { return reflect.TypeFor[T]() }
func valueOf(v any) reflect.Value { return reflect.ValueOf(v) }

func TestRowRoundTrip(t *testing.T) {
	note := "n\"ote"
	var cnt uint16 = 7
	in := goodRow{
		ID: "t1", ProjectID: "p7", Owner: -3, Title: "hé\nllo", Done: true, Score: 1.5,
		At: time.Date(2026, 11, 30, 15, 4, 5, 123456000, time.UTC), Note: &note,
		Blob: []byte{0, 1, 2, 255}, Meta: json.RawMessage(`{"a":[1,2]}`), Count: &cnt,
		Ignored: "x", Skipped: "y",
	}
	key, row, err := EncodeRow(in)
	if err != nil {
		t.Fatal(err)
	}
	if key != "t1" || !json.Valid(row) {
		t.Fatalf("key %q row %s", key, row)
	}
	out, err := DecodeRow[goodRow](row)
	if err != nil {
		t.Fatal(err)
	}
	in.Ignored, in.Skipped = "", ""
	if !out.At.Equal(in.At) {
		t.Fatalf("time %v != %v", out.At, in.At)
	}
	out.At = in.At
	a, _ := json.Marshal(in)
	b, _ := json.Marshal(out)
	if string(a) != string(b) {
		t.Fatalf("round trip:\n in %s\nout %s", a, b)
	}
	// Nil pointers and slices are null.
	_, row, err = EncodeRow(goodRow{ID: "t2"})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	_ = json.Unmarshal(row, &m)
	for _, col := range []string{"note", "blob", "meta", "count"} {
		if v, ok := m[col]; !ok || v != nil {
			t.Fatalf("%s = %v, want null", col, v)
		}
	}
}

func TestEncodeRejectsUnencodable(t *testing.T) {
	type f struct {
		ID string  `tide:"id,pk"`
		X  float64 `tide:"x"`
	}
	type j struct {
		ID string          `tide:"id,pk"`
		M  json.RawMessage `tide:"m"`
	}
	nan := 0.0
	nan = nan / nan
	if _, _, err := EncodeRow(f{ID: "a", X: nan}); err == nil {
		t.Fatal("NaN encoded")
	}
	if _, _, err := EncodeRow(j{ID: "a", M: json.RawMessage("{")}); err == nil {
		t.Fatal("invalid raw JSON encoded")
	}
}

func TestKeyAndScopeText(t *testing.T) {
	type r struct {
		ID    uint64 `tide:"id,pk"`
		Org   int8   `tide:"org,scope"`
		Flag  bool   `tide:"flag,scope"`
		Title string `tide:"title"`
	}
	c, err := CodecFor(typeOf[r]())
	if err != nil {
		t.Fatal(err)
	}
	key, scope, _, err := c.Encode(valueOf(r{ID: 18446744073709551615, Org: -128, Flag: true}))
	if err != nil {
		t.Fatal(err)
	}
	if key != "18446744073709551615" || scope[0] != "-128" || scope[1] != "true" {
		t.Fatalf("key %q scope %q", key, scope)
	}
}

// FuzzDecodeRowFast: wherever the fast row decoder answers, it agrees with
// the encoding/json path.
func FuzzDecodeRowFast(f *testing.F) {
	for _, s := range []string{
		`{"id":"t1","project_id":"p7","owner":-3,"title":"hi","done":true,"score":1.5,"at":"2026-11-30T15:04:05.123456Z","note":"n","blob":"AAEC/w==","meta":{"a":[1,2]},"count":7}`,
		`{"id": "t2", "owner": 9223372036854775807, "note": null, "count": null, "extra": [1, {"x": "y"}]}`,
		`{"id":"t3","at":"2026-11-30T15:04:05+02:00","score":-1e-7,"meta":null}`,
		`{"id":"t\u00e9","owner":1.0}`, `{}`, `{"count":70000}`, `{"id":"a","id":"b"}`,
	} {
		f.Add([]byte(s))
	}
	c, err := CodecFor(typeOf[goodRow]())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast, shared goodRow
		if !c.decodeFast(data, valueOf(&fast).Elem(), false) {
			if c.decodeFast(data, valueOf(&shared).Elem(), true) {
				t.Fatalf("%q: the sharing fast path answers, the copying one does not", data)
			}
			return
		}
		if !c.decodeFast(data, valueOf(&shared).Elem(), true) {
			t.Fatalf("%q: the copying fast path answers, the sharing one does not", data)
		}
		if a, b := mustJSON(t, fast), mustJSON(t, shared); a != b || !fast.At.Equal(shared.At) {
			t.Fatalf("%q: copying %s, sharing %s", data, a, b)
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(data, &obj); err != nil {
			t.Fatalf("fast path accepted %q, encoding/json refuses it: %v", data, err)
		}
		var slow goodRow
		sv := valueOf(&slow).Elem()
		for _, fc := range c.fields {
			if raw, ok := obj[fc.col.Name]; ok {
				if err := json.Unmarshal(raw, sv.Field(fc.field).Addr().Interface()); err != nil {
					t.Fatalf("fast path accepted %q, encoding/json refuses column %s: %v", data, fc.col.Name, err)
				}
			}
		}
		a, _ := json.Marshal(fast)
		b, _ := json.Marshal(slow)
		if string(a) != string(b) || !fast.At.Equal(slow.At) {
			t.Fatalf("%q:\nfast %s\nslow %s", data, a, b)
		}
	})
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// benchItem is the row of cmd/tideload's replay and fan-out modes.
type benchItem struct {
	ID     string `tide:"id,pk"`
	Scope  string `tide:"scope,scope"`
	Tenant string `tide:"tenant"`
	Body   string `tide:"body"`
	SentNS int64  `tide:"sent_ns"`
}

// TestDecodeKeyOrders decodes the same row with its keys in Encode's
// order, in jsonb's, in neither, with one key unknown, and with a key
// twice (the last wins, as with encoding/json): the guesses of where a
// key comes next change nothing but speed.
func TestDecodeKeyOrders(t *testing.T) {
	c, err := CodecFor(typeOf[benchItem]())
	if err != nil {
		t.Fatal(err)
	}
	want := benchItem{ID: "7", Scope: "s0", Tenant: "acme", Body: "lorem", SentNS: 42}
	for _, row := range []string{
		`{"id":"7","scope":"s0","tenant":"acme","body":"lorem","sent_ns":42}`,
		`{"id":"7","body":"lorem","scope":"s0","tenant":"acme","sent_ns":42}`,
		`{"sent_ns":42,"tenant":"acme","body":"lorem","id":"7","scope":"s0"}`,
		`{"id":"7","extra":[1,{"a":"b"}],"scope":"s0","tenant":"acme","body":"lorem","sent_ns":42}`,
		`{"id":"7","scope":"s1","tenant":"acme","body":"lorem","sent_ns":42,"scope":"s0"}`,
		`{ "id" : "7", "scope":"s0","tenant":"acme","body":"lorem","sent_ns":42}`,
	} {
		for _, share := range []bool{false, true} {
			var got benchItem
			if !c.decodeFast([]byte(row), valueOf(&got).Elem(), share) {
				t.Errorf("decodeFast(%s) refused", row)
				continue
			}
			if got != want {
				t.Errorf("decodeFast(%s) = %+v, want %+v", row, got, want)
			}
		}
	}
}

// BenchmarkDecodeRow decodes a tideload row (a 64-byte body) with its keys
// in Encode's order (the in-memory feed) and in jsonb's (Postgres).
func BenchmarkDecodeRow(b *testing.B) {
	c, err := CodecFor(typeOf[benchItem]())
	if err != nil {
		b.Fatal(err)
	}
	body := "lorem ipsum dolor sit amet lorem ipsum dolor sit amet lorem ipsu"
	for _, tc := range []struct{ name, row string }{
		{"declared", `{"id":"12345","scope":"s0","tenant":"acme","body":"` + body + `","sent_ns":12345}`},
		{"jsonb", `{"id":"12345","body":"` + body + `","scope":"s0","tenant":"acme","sent_ns":12345}`},
	} {
		b.Run(tc.name, func(b *testing.B) {
			row := []byte(tc.row)
			var v benchItem
			rv := valueOf(&v).Elem()
			b.SetBytes(int64(len(row)))
			b.ReportAllocs()
			for b.Loop() {
				if err := c.DecodeShared(row, rv); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
