// Package jsontext holds tide's hand-written JSON text helpers: the string
// encoder frames and rows are built with on the hot paths, the scanner
// that finds the bytes a JSON string must escape, and the wording of a
// decoding error for a person.
package jsontext

import (
	"encoding"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
)

// DescribeError says what an encoding/json decoding error means in
// JSON's own terms, for a person: "id must be a string", "count must be a
// whole number", "the arguments must be valid JSON". It never names Go
// types or fields; what names the whole value ("the arguments") for an
// error about the value itself rather than one of its fields. It reports
// false for an error that is not a *json.UnmarshalTypeError or a
// *json.SyntaxError (an UnmarshalJSON method's own error, say), whose text
// the caller must word itself.
func DescribeError(err error, what string) (string, bool) {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			field = what
		}
		if n, ok := strings.CutPrefix(te.Value, "number "); ok {
			// A number, but a fraction for an integer, or out of range.
			if isInteger(te.Type) && strings.ContainsAny(n, ".eE") {
				return field + " must be a whole number", true
			}
			return field + " is out of range", true
		}
		if kind := jsonKind(te.Type); kind != "" {
			return field + " must be " + kind, true
		}
		return field + " has the wrong type", true
	case errors.As(err, &se):
		return what + " must be valid JSON", true
	}
	return "", false
}

var textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()

// jsonKind names the JSON value a Go type decodes from, with its article;
// "" when any would do or it cannot tell.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return ""
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Implements(textUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
		return "a string"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "a string" // []byte: base64
		}
		return "an array"
	case reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return ""
}

// isInteger reports whether t decodes from a JSON integer only.
func isInteger(t reflect.Type) bool {
	if t == nil {
		return false
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return true
	}
	return false
}
