package protocol

import (
	"encoding"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tidesync/tide/internal/jsontext"
)

// Errors returned when a struct cannot describe a resource.
var (
	ErrNoPrimaryKey    = errors.New("no field is tagged as primary key (tide:\"column,pk\")")
	ErrUnsupportedType = errors.New("unsupported field type")
	ErrBadTag          = errors.New("invalid tide struct tag")
)

var (
	timeType            = reflect.TypeFor[time.Time]()
	rawJSONType         = reflect.TypeFor[json.RawMessage]()
	decimalType         = reflect.TypeFor[Decimal]()
	textMarshalerType   = reflect.TypeFor[encoding.TextMarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// fieldCodec reads and writes one column of a struct.
type fieldCodec struct {
	field int // index of the struct field
	col   Column
	// isPtr: the field is a pointer to the column's Go type (a nullable column).
	isPtr bool
	// elemPtr: an array field's elements are pointers (nil: a NULL element).
	elemPtr bool
	// skip: decoding may leave the field as it is (a codec from Only).
	skip bool
	// maxDigits: for an integer field, the most decimal digits every
	// number of which fits it (0 otherwise, and where skip is false).
	maxDigits int
	// name is the column's name as a JSON key with its colon, `"name":`,
	// which decodeFast looks for where it expects this column next.
	name string
}

// RowCodec maps a struct type to its columns (its `tide:"…"` tags) and
// converts values to JSON rows and canonical key and scope text, the form
// rows take on the wire. It is immutable and safe for concurrent use.
type RowCodec struct {
	typ    reflect.Type
	fields []fieldCodec
	keys   []int // indexes in fields of the primary key's parts, in declared order
	scope  []int // indexes in fields of scope columns
	// guesses[i+1] are the fields decodeFast expects after fields[i]
	// (guesses[0]: first): the next in the order Encode writes the
	// columns, then the next in jsonb's (shorter names first, then
	// bytewise), which is how Postgres feeds render rows. -1: none.
	guesses [][2]int
}

var codecs sync.Map // reflect.Type → *RowCodec or error

// CodecFor returns the (cached) codec of struct type t. It fails with an
// error wrapping ErrBadTag, ErrUnsupportedType or ErrNoPrimaryKey when t
// cannot describe a resource.
func CodecFor(t reflect.Type) (*RowCodec, error) {
	if v, ok := codecs.Load(t); ok {
		if err, isErr := v.(error); isErr {
			return nil, err
		}
		return v.(*RowCodec), nil
	}
	c, err := buildCodec(t)
	if err != nil {
		codecs.Store(t, err)
		return nil, err
	}
	v, _ := codecs.LoadOrStore(t, c)
	return v.(*RowCodec), nil
}

func buildCodec(t reflect.Type) (*RowCodec, error) {
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("%w: %s is not a struct", ErrUnsupportedType, t)
	}
	c := &RowCodec{typ: t}
	seen := map[string]string{}
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		tag, ok := sf.Tag.Lookup("tide")
		if !ok {
			continue
		}
		spec, err := parseTag(tag)
		if err != nil {
			return nil, fmt.Errorf("%w: field %s: %v", ErrBadTag, sf.Name, err)
		}
		if spec.Skip {
			continue
		}
		if !sf.IsExported() {
			return nil, fmt.Errorf("%w: field %s is tagged but not exported", ErrBadTag, sf.Name)
		}
		if prev, dup := seen[spec.Column]; dup {
			return nil, fmt.Errorf("%w: column %q is declared by fields %s and %s", ErrBadTag, spec.Column, prev, sf.Name)
		}
		seen[spec.Column] = sf.Name
		kind, isPtr, elemPtr, err := kindOf(sf.Type)
		if err != nil {
			return nil, fmt.Errorf("field %s (column %s): %w", sf.Name, spec.Column, err)
		}
		fc := fieldCodec{field: i, col: Column{Name: spec.Column, Kind: kind, Nullable: isPtr, Field: sf.Name}, isPtr: isPtr, elemPtr: elemPtr}
		if (spec.PK || spec.Scope) && (isPtr || !kind.Keyable()) {
			what := "scope"
			if spec.PK {
				what = "primary key"
			}
			return nil, fmt.Errorf("%w: field %s: a %s column must be a string, integer or bool, not %s", ErrUnsupportedType, sf.Name, what, sf.Type)
		}
		if spec.PK {
			c.keys = append(c.keys, len(c.fields))
		}
		if spec.Scope {
			c.scope = append(c.scope, len(c.fields))
		}
		c.fields = append(c.fields, fc)
	}
	if len(c.keys) == 0 {
		return nil, fmt.Errorf("%s: %w", t, ErrNoPrimaryKey)
	}
	c.guessOrder()
	return c, nil
}

// guessOrder fills the fields' JSON keys and c.guesses.
func (c *RowCodec) guessOrder() {
	n := len(c.fields)
	jsonb := make([]int, n)
	for i := range c.fields {
		c.fields[i].name = string(jsontext.AppendString(nil, c.fields[i].col.Name)) + ":"
		jsonb[i] = i
	}
	slices.SortFunc(jsonb, func(a, b int) int {
		x, y := c.fields[a].col.Name, c.fields[b].col.Name
		if len(x) != len(y) {
			return len(x) - len(y)
		}
		return strings.Compare(x, y)
	})
	c.guesses = make([][2]int, n+1)
	for i := range c.guesses {
		c.guesses[i] = [2]int{-1, -1}
		if i < n {
			c.guesses[i][0] = i
		}
	}
	prev := -1
	for _, f := range jsonb {
		c.guesses[prev+1][1] = f
		prev = f
	}
}

// kindOf maps a field type to a column kind. isPtr: the field is a pointer
// (a nullable scalar); elemPtr: an array's elements are pointers.
func kindOf(t reflect.Type) (kind Kind, isPtr, elemPtr bool, err error) {
	if t.Kind() == reflect.Pointer {
		isPtr = true
		t = t.Elem()
	}
	switch {
	case t == timeType:
		return KindTime, isPtr, false, nil
	case t == decimalType:
		return KindDecimal, isPtr, false, nil
	case t == rawJSONType && !isPtr:
		return KindJSON, false, false, nil
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8 && !isPtr && !isText(t):
		return KindBytes, false, false, nil
	case t.Kind() == reflect.Slice && !isText(t) && isPtr:
		return 0, false, false, fmt.Errorf("%w *%s: a slice field is nullable as it is (a nil slice is NULL), declare it without the pointer", ErrUnsupportedType, t)
	case t.Kind() == reflect.Slice && !isText(t):
		et := t.Elem()
		if et.Kind() == reflect.Pointer {
			elemPtr = true
			et = et.Elem()
		}
		if et.Kind() == reflect.Slice && et.Elem().Kind() != reflect.Uint8 || et.Kind() == reflect.Array {
			return 0, false, false, fmt.Errorf("%w %s: multidimensional arrays are not supported (declare json.RawMessage for a column of nested arrays)", ErrUnsupportedType, t)
		}
		ek, ok := scalarKind(et)
		if !ok || ek == KindText {
			return 0, false, false, fmt.Errorf("%w %s: an array's elements must be string, integer, float, bool, time.Time or protocol.Decimal (or pointers to them), not %s (declare json.RawMessage for other arrays)", ErrUnsupportedType, t, et)
		}
		return KindArray | ek, false, elemPtr, nil
	}
	if k, ok := scalarKind(t); ok {
		return k, isPtr, false, nil
	}
	return 0, false, false, fmt.Errorf("%w %s (want string, bool, integer, float, time.Time, protocol.Decimal, []byte, json.RawMessage, a type implementing encoding.TextMarshaler and TextUnmarshaler, a slice of a scalar for an array column, or a pointer to a scalar for a nullable column)", ErrUnsupportedType, t)
}

// isText reports whether values of t convert to and from text
// (encoding.TextMarshaler on the value, TextUnmarshaler on its pointer).
func isText(t reflect.Type) bool {
	return t.Implements(textMarshalerType) && reflect.PointerTo(t).Implements(textUnmarshalerType)
}

// scalarKind maps a non-pointer, non-slice field type to its kind. A type
// of a basic kind (string, integer, float, bool) keeps that kind whatever
// its methods; any other implementing encoding.TextMarshaler and
// TextUnmarshaler is KindText.
func scalarKind(t reflect.Type) (Kind, bool) {
	switch t {
	case timeType:
		return KindTime, true
	case decimalType:
		return KindDecimal, true
	}
	switch t.Kind() {
	case reflect.String:
		return KindString, true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return KindInt, true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return KindUint, true
	case reflect.Float32, reflect.Float64:
		return KindFloat, true
	case reflect.Bool:
		return KindBool, true
	}
	if isText(t) {
		return KindText, true
	}
	return 0, false
}

// Columns returns the struct's columns in field order.
func (c *RowCodec) Columns() []Column {
	cols := make([]Column, len(c.fields))
	for i, f := range c.fields {
		cols[i] = f.col
	}
	return cols
}

// Only returns a codec that decodes only the columns cols (indexes in
// Columns) into a struct: the other columns' fields may keep the value
// they had (zero in a new value) instead, when the row lets it skip them
// without decoding (text columns whose strings hold no escapes); they are
// decoded otherwise. A row decodes with it, without error, exactly when
// it decodes with c, and the columns cols get the same values. It is for
// readers of a few columns of every row, such as row filters; it encodes
// as c does.
func (c *RowCodec) Only(cols []int) *RowCodec {
	o := *c
	o.fields = slices.Clone(c.fields)
	for i := range o.fields {
		f := &o.fields[i]
		f.skip = !slices.Contains(cols, i)
		if f.skip && (f.col.Kind == KindInt || f.col.Kind == KindUint) {
			t := c.typ.Field(f.field).Type
			if f.isPtr {
				t = t.Elem()
			}
			bits := t.Bits()
			if f.col.Kind == KindInt {
				bits-- // the sign
			}
			// floor(bits·log10 2) digits: 10^d - 1 < 2^bits.
			f.maxDigits = int(float64(bits) * math.Log10(2))
		}
	}
	return &o
}

// Keys returns the indexes in Columns of the primary key's parts, in
// declared order: one for a single-column key, several for a composite
// key. The slice is a copy.
func (c *RowCodec) Keys() []int { return append([]int(nil), c.keys...) }

// Scope returns the indexes in Columns of the scope columns, in declared
// order. The slice is a copy.
func (c *RowCodec) Scope() []int { return append([]int(nil), c.scope...) }

// KeyOf returns the canonical text of v's primary key (see EncodeKey); v
// is a value of the codec's struct type.
func (c *RowCodec) KeyOf(v reflect.Value) string {
	if len(c.keys) == 1 {
		return keyText(v.Field(c.fields[c.keys[0]].field))
	}
	parts := make([]string, len(c.keys))
	for i, fi := range c.keys {
		parts[i] = keyText(v.Field(c.fields[fi].field))
	}
	return EncodeKey(parts...)
}

// keyText returns the canonical text of a keyable field value.
func keyText(v reflect.Value) string {
	switch v.Kind() {
	case reflect.String:
		return v.String()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(v.Int(), 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return strconv.FormatUint(v.Uint(), 10)
	case reflect.Bool:
		return strconv.FormatBool(v.Bool())
	}
	panic("tide: keyText of a non-keyable kind") // excluded by buildCodec
}

// Encode returns the key, scope values and JSON object of v, a value of the
// codec's struct type.
func (c *RowCodec) Encode(v reflect.Value) (key string, scope []string, row []byte, err error) {
	key = c.KeyOf(v)
	scope = make([]string, len(c.scope))
	for i, fi := range c.scope {
		scope[i] = keyText(v.Field(c.fields[fi].field))
	}
	row = append(make([]byte, 0, 64*len(c.fields)), '{')
	for i, f := range c.fields {
		if i > 0 {
			row = append(row, ',')
		}
		row = jsontext.AppendString(row, f.col.Name)
		row = append(row, ':')
		if row, err = appendValue(row, f, v.Field(f.field)); err != nil {
			return "", nil, nil, fmt.Errorf("column %s: %w", f.col.Name, err)
		}
	}
	return key, scope, append(row, '}'), nil
}

func appendValue(b []byte, f fieldCodec, v reflect.Value) ([]byte, error) {
	if f.isPtr {
		if v.IsNil() {
			return append(b, "null"...), nil
		}
		v = v.Elem()
	}
	k := f.col.Kind
	if !k.IsArray() {
		return appendScalar(b, k, v)
	}
	if v.IsNil() {
		return append(b, "null"...), nil
	}
	b = append(b, '[')
	for i := range v.Len() {
		if i > 0 {
			b = append(b, ',')
		}
		e := v.Index(i)
		if f.elemPtr {
			if e.IsNil() {
				b = append(b, "null"...)
				continue
			}
			e = e.Elem()
		}
		var err error
		if b, err = appendScalar(b, k.Elem(), e); err != nil {
			return nil, fmt.Errorf("element %d: %w", i, err)
		}
	}
	return append(b, ']'), nil
}

// appendScalar appends the JSON of v, a value of a field of kind k (not an
// array).
func appendScalar(b []byte, k Kind, v reflect.Value) ([]byte, error) {
	switch k {
	case KindString:
		return jsontext.AppendString(b, v.String()), nil
	case KindInt:
		return strconv.AppendInt(b, v.Int(), 10), nil
	case KindUint:
		return strconv.AppendUint(b, v.Uint(), 10), nil
	case KindBool:
		return strconv.AppendBool(b, v.Bool()), nil
	case KindFloat:
		x := v.Float()
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, fmt.Errorf("%v cannot be encoded as JSON", x)
		}
		out, err := json.Marshal(v.Interface())
		return append(b, out...), err
	case KindTime:
		t := v.Interface().(time.Time)
		if y := t.Year(); y < 0 || y > 9999 {
			return nil, fmt.Errorf("year %d is outside [0,9999]", y)
		}
		b = append(b, '"')
		b = t.AppendFormat(b, time.RFC3339Nano)
		return append(b, '"'), nil
	case KindDecimal:
		d := Decimal(v.String())
		if d == "" {
			return append(b, `"0"`...), nil
		}
		if !validDecimal(string(d)) {
			_, err := ParseDecimal(string(d))
			return nil, err
		}
		return jsontext.AppendString(b, string(d)), nil
	case KindText:
		txt, err := v.Interface().(encoding.TextMarshaler).MarshalText()
		if err != nil {
			return nil, fmt.Errorf("MarshalText: %w", err)
		}
		return jsontext.AppendString(b, string(txt)), nil
	case KindBytes:
		if v.IsNil() {
			return append(b, "null"...), nil
		}
		b = append(b, '"')
		b = base64.StdEncoding.AppendEncode(b, v.Bytes())
		return append(b, '"'), nil
	case KindJSON:
		raw := v.Bytes()
		if len(raw) == 0 {
			return append(b, "null"...), nil
		}
		if !json.Valid(raw) {
			return nil, errors.New("json.RawMessage holds invalid JSON")
		}
		return append(b, raw...), nil
	}
	return nil, fmt.Errorf("%w: kind %s", ErrUnsupportedType, k)
}

// Decode fills the struct v (addressable, of the codec's type) from a JSON
// row. Columns missing from the row keep their zero value; unknown keys are
// ignored.
func (c *RowCodec) Decode(row []byte, v reflect.Value) error {
	return c.decode(row, v, false)
}

// DecodeShared is Decode, except that string and json.RawMessage fields of
// v refer to row's bytes instead of copies of them, where the row lets it
// (strings without escapes; anything else is copied): row must not be
// modified while v is in use. Row filters decode every row of a replay or
// snapshot this way, from a feed's rows, which are never modified.
func (c *RowCodec) DecodeShared(row []byte, v reflect.Value) error {
	return c.decode(row, v, true)
}

func (c *RowCodec) decode(row []byte, v reflect.Value, share bool) error {
	if c.decodeFast(row, v, share) {
		return nil
	}
	v.SetZero()
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(row, &obj); err != nil {
		return fmt.Errorf("tide: row is not a JSON object: %w", err)
	}
	if obj == nil {
		return errors.New("tide: row is null")
	}
	for _, f := range c.fields {
		raw, ok := obj[f.col.Name]
		if !ok {
			continue
		}
		if err := json.Unmarshal(raw, v.Field(f.field).Addr().Interface()); err != nil {
			return fmt.Errorf("tide: column %s: %w", f.col.Name, err)
		}
	}
	return nil
}

// DecodeRow decodes a JSON row, as carried by a changes frame, into a value
// of struct type T using its tide tags. It is safe for concurrent use.
func DecodeRow[T any](row json.RawMessage) (T, error) {
	var out T
	c, err := CodecFor(reflect.TypeFor[T]())
	if err != nil {
		return out, err
	}
	err = c.Decode(row, reflect.ValueOf(&out).Elem())
	return out, err
}

// EncodeRow encodes a value of struct type T as tide puts it on the wire: its
// primary key and the JSON object of its columns.
func EncodeRow[T any](v T) (key string, row json.RawMessage, err error) {
	c, err := CodecFor(reflect.TypeFor[T]())
	if err != nil {
		return "", nil, err
	}
	key, _, row, err = c.Encode(reflect.ValueOf(v))
	return key, row, err
}
