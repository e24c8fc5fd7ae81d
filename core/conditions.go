package core

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/internal/text"
)

// parseConditions validates wire conditions against a resource's scope
// columns and their kinds, and returns the normalized scope. A condition is a
// scalar (equality) or {"in": [scalars…]}. Column names are matched exactly;
// values must have the column's JSON type (integers may also be sent as
// strings of digits, since JavaScript numbers cannot hold every int64).
//
// maxConds bounds the number of conditions and maxValues the number of values
// across all of them; exceeding either is protocol.CodeTooManyConditions.
func parseConditions(s *feed.Schema, conds map[string]json.RawMessage, maxConds, maxValues int) (feed.Scope, *protocol.Error) {
	if len(conds) > maxConds {
		return feed.Scope{}, protocol.Errorf(protocol.CodeTooManyConditions, "%d conditions; at most %d are allowed", len(conds), maxConds)
	}
	out := make([]feed.Cond, 0, len(conds))
	total := 0
	for name, raw := range conds {
		col := s.ScopeIndex(name)
		if col < 0 {
			return feed.Scope{}, protocol.Errorf(protocol.CodeInvalidConditions, "%q is not a scope column of %s", text.Truncate(name, 64), s.Name)
		}
		kind := s.ScopeColumn(col).Kind
		raw = bytes.TrimSpace(raw)
		var values []string
		if len(raw) > 0 && raw[0] == '{' {
			var in struct {
				In []json.RawMessage `json:"in"`
			}
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&in); err != nil {
				return feed.Scope{}, protocol.Errorf(protocol.CodeInvalidConditions, `%s: a condition is a value or {"in": [values]}`, name)
			}
			if len(in.In) == 0 {
				return feed.Scope{}, protocol.Errorf(protocol.CodeInvalidConditions, `%s: "in" needs at least one value`, name)
			}
			if total+len(in.In) > maxValues {
				return feed.Scope{}, protocol.Errorf(protocol.CodeTooManyConditions, "more than %d condition values", maxValues)
			}
			for _, v := range in.In {
				text, err := conditionValue(kind, v)
				if err != nil {
					return feed.Scope{}, protocol.Errorf(protocol.CodeInvalidConditions, "%s: %s", name, err.Message)
				}
				values = append(values, text)
			}
		} else {
			text, err := conditionValue(kind, raw)
			if err != nil {
				return feed.Scope{}, protocol.Errorf(protocol.CodeInvalidConditions, "%s: %s", name, err.Message)
			}
			values = []string{text}
		}
		total += len(values)
		if total > maxValues {
			return feed.Scope{}, protocol.Errorf(protocol.CodeTooManyConditions, "more than %d condition values", maxValues)
		}
		out = append(out, feed.Cond{Col: col, Values: values})
	}
	return feed.NewScope(s, out), nil
}

// conditionValue converts one JSON scalar to the canonical text of a column
// of the given kind.
func conditionValue(kind protocol.Kind, raw json.RawMessage) (string, *protocol.Error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "", protocol.Errorf(protocol.CodeInvalidConditions, "empty value")
	}
	switch kind {
	case protocol.KindString:
		var s string
		if raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
			return "", protocol.Errorf(protocol.CodeInvalidConditions, "want a string")
		}
		return s, nil
	case protocol.KindBool:
		switch string(raw) {
		case "true", "false":
			return string(raw), nil
		}
		return "", protocol.Errorf(protocol.CodeInvalidConditions, "want true or false")
	case protocol.KindInt, protocol.KindUint:
		digits := raw
		if raw[0] == '"' {
			var s string
			if json.Unmarshal(raw, &s) != nil {
				return "", protocol.Errorf(protocol.CodeInvalidConditions, "want an integer")
			}
			digits = []byte(s)
		}
		if !isCanonicalInt(digits) {
			return "", protocol.Errorf(protocol.CodeInvalidConditions, "want an integer")
		}
		if kind == protocol.KindInt {
			n, err := strconv.ParseInt(string(digits), 10, 64)
			if err != nil {
				return "", protocol.Errorf(protocol.CodeInvalidConditions, "integer out of range")
			}
			return strconv.FormatInt(n, 10), nil
		}
		n, err := strconv.ParseUint(string(digits), 10, 64)
		if err != nil {
			return "", protocol.Errorf(protocol.CodeInvalidConditions, "want a non-negative integer in range")
		}
		return strconv.FormatUint(n, 10), nil
	}
	return "", protocol.Errorf(protocol.CodeInvalidConditions, "column of kind %s cannot be a condition", kind)
}

// isCanonicalInt accepts an optional minus sign and digits without leading
// zeros: exactly the integers whose text is canonical.
func isCanonicalInt(b []byte) bool {
	if len(b) > 0 && b[0] == '-' {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 20 || (b[0] == '0' && len(b) > 1) {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// conditionsMap renders a scope's conditions for a policy.
func conditionsMap(sc feed.Scope) map[string][]string {
	m := make(map[string][]string, len(sc.Conds))
	for _, c := range sc.Conds {
		m[sc.Schema.ScopeColumn(c.Col).Name] = c.Values
	}
	return m
}
