package core

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/tidesync/tide/core/protocol"
)

// TestRegisterValueKinds: decimals, arrays, text-form types and named
// string types register with their kinds; the types tide cannot carry are
// refused with an error naming the field, its column, its type and what
// to declare instead.
func TestRegisterValueKinds(t *testing.T) {
	type mood string
	type kinds struct {
		ID     string             `tide:"id,pk"`
		Price  protocol.Decimal   `tide:"price"`
		Maybe  *protocol.Decimal  `tide:"maybe"`
		Tags   []string           `tide:"tags"`
		Ns     []*int64           `tide:"ns"`
		Ts     []time.Time        `tide:"ts"`
		Ds     []protocol.Decimal `tide:"ds"`
		Mood   mood               `tide:"mood"`
		Addr   netip.Addr         `tide:"addr"`
		MaybeN *netip.Prefix      `tide:"net"`
	}
	e := newTestEngine(t)
	tbl, err := Register(e, Resource[kinds]{Table: "kinds"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range tbl.Schema().Columns {
		got = append(got, c.Name+":"+c.Kind.String())
	}
	const want = "id:string,price:decimal,maybe:decimal,tags:[]string,ns:[]int,ts:[]time,ds:[]decimal,mood:string,addr:text,net:text"
	if s := strings.Join(got, ","); s != want {
		t.Fatalf("kinds %s\nwant  %s", s, want)
	}

	type nested struct {
		ID   string    `tide:"id,pk"`
		Grid [][]int64 `tide:"grid"`
	}
	type ptrSlice struct {
		ID   string    `tide:"id,pk"`
		Tags *[]string `tide:"tags"`
	}
	type mapField struct {
		ID   string         `tide:"id,pk"`
		Meta map[string]int `tide:"meta"`
	}
	type addrs struct {
		ID    string       `tide:"id,pk"`
		Addrs []netip.Addr `tide:"addrs"`
	}
	type decScope struct {
		ID    string           `tide:"id,pk"`
		Price protocol.Decimal `tide:"price,scope"`
	}
	type arrScope struct {
		ID   string   `tide:"id,pk"`
		Tags []string `tide:"tags,scope"`
	}
	type textKey struct {
		ID netip.Addr `tide:"id,pk"`
	}
	for _, tc := range []struct {
		register func() error
		want     string
	}{
		{func() error { _, err := Register(e, Resource[nested]{Table: "a"}); return err },
			"field Grid (column grid): unsupported field type [][]int64: multidimensional arrays are not supported (declare json.RawMessage for a column of nested arrays)"},
		{func() error { _, err := Register(e, Resource[ptrSlice]{Table: "a"}); return err },
			"field Tags (column tags): unsupported field type *[]string: a slice field is nullable as it is (a nil slice is NULL), declare it without the pointer"},
		{func() error { _, err := Register(e, Resource[mapField]{Table: "a"}); return err },
			"field Meta (column meta): unsupported field type map[string]int (want string, bool, integer, float, time.Time, protocol.Decimal, []byte, json.RawMessage, a type implementing encoding.TextMarshaler and TextUnmarshaler"},
		{func() error { _, err := Register(e, Resource[addrs]{Table: "a"}); return err },
			"field Addrs (column addrs): unsupported field type []netip.Addr: an array's elements must be string, integer, float, bool, time.Time or protocol.Decimal (or pointers to them), not netip.Addr (declare json.RawMessage for other arrays)"},
		{func() error { _, err := Register(e, Resource[decScope]{Table: "a"}); return err },
			"field Price: a scope column must be a string, integer or bool, not protocol.Decimal"},
		{func() error { _, err := Register(e, Resource[arrScope]{Table: "a"}); return err },
			"field Tags: a scope column must be a string, integer or bool, not []string"},
		{func() error { _, err := Register(e, Resource[textKey]{Table: "a"}); return err },
			"field ID: a primary key column must be a string, integer or bool, not netip.Addr"},
	} {
		err := tc.register()
		if !errors.Is(err, protocol.ErrUnsupportedType) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Register: %v\nwant an ErrUnsupportedType containing %q", err, tc.want)
		}
	}
}
