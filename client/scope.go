package client

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/tidesync/tide/core/protocol"
)

// Scope is what a subscription covers: a resource and conditions on its
// declared scope columns, as in the protocol's subscribe frame.
//
// A condition value is a scalar (equality: a string, a bool or an integer)
// or a map {"in": list} whose list holds one or more scalars, e.g.
//
//	client.Scope{Resource: "todos", Conditions: map[string]any{
//		"project_id": map[string]any{"in": []string{"p7", "p8"}},
//		"done":       false,
//	}}
//
// Conditions are normalized before use: "in" lists are sorted and
// deduplicated, and a one-value "in" list is the same scope as that value.
// A Scope must not be modified after it is passed to Subscribe.
//
// A scope may follow several resources that share the conditions' columns,
// under one cursor: list them in Resources (Resource, if also set, is one
// more). Every entry of its batches names its resource, entries of one
// server transaction arrive in one batch, in commit order, and the scope
// is one subscription and one record in the store, e.g.
//
//	client.Scope{Resources: []string{"todos", "comments", "attachments"},
//		Conditions: map[string]any{"project_id": "p7"}}
type Scope struct {
	Resource   string
	Conditions map[string]any
	Resources  []string
}

// names returns the scope's resources, sorted, without duplicates.
func (s Scope) names() []string {
	out := slices.Clone(s.Resources)
	if s.Resource != "" {
		out = append(out, s.Resource)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ErrInvalidScope is wrapped by the errors Subscribe and Digest return for a
// scope the protocol cannot express.
var ErrInvalidScope = errors.New("client: invalid scope")

// Digest returns the stable identity of the scope: a hex SHA-256 of its
// resource and normalized conditions. Two scopes with the same digest cover
// the same rows. The digest keys the scope's record in a CursorStore.
func (s Scope) Digest() (string, error) {
	n, err := s.normalize()
	if err != nil {
		return "", err
	}
	return n.digest, nil
}

// String returns the resource followed by the normalized conditions, for
// logs; an invalid scope is rendered as given.
func (s Scope) String() string {
	n, err := s.normalize()
	if err != nil {
		return fmt.Sprintf("%s%v", s.Resource, s.Conditions)
	}
	name := n.resource
	if len(n.resources) > 0 {
		name = strings.Join(n.resources, "+")
	}
	if len(n.condMap) == 0 {
		return name
	}
	return name + string(n.condJSON)
}

// normScope is a validated scope in wire form.
type normScope struct {
	resource  string                     // the first resource
	resources []string                   // all of them, sorted, when there are several; nil for one
	condJSON  json.RawMessage            // canonical JSON object; nil without conditions
	condMap   map[string]json.RawMessage // the same, for the subscribe frame
	digest    string
}

const maxNameBytes = 128 // resource and column names, ids: the protocol's limit

func (s Scope) normalize() (normScope, error) {
	names := s.names()
	if len(names) == 0 || names[0] == "" {
		return normScope{}, fmt.Errorf("%w: Resource is empty (subscribing to nothing)", ErrInvalidScope)
	}
	if len(names) > protocol.MaxResourcesN {
		return normScope{}, fmt.Errorf("%w: at most %d resources", ErrInvalidScope, protocol.MaxResourcesN)
	}
	for _, r := range names {
		if err := checkText("resource", r, maxNameBytes); err != nil {
			return normScope{}, fmt.Errorf("%w: %v", ErrInvalidScope, err)
		}
	}
	n := normScope{resource: names[0]}
	if len(names) > 1 {
		n.resources = names
	}
	if len(s.Conditions) > 0 {
		n.condMap = make(map[string]json.RawMessage, len(s.Conditions))
		for col, v := range s.Conditions {
			if col == "" {
				return normScope{}, fmt.Errorf("%w: a condition has an empty column name", ErrInvalidScope)
			}
			if err := checkText("column", col, maxNameBytes); err != nil {
				return normScope{}, fmt.Errorf("%w: %v", ErrInvalidScope, err)
			}
			raw, err := normalizeCondition(v)
			if err != nil {
				return normScope{}, fmt.Errorf("%w: condition %q: %v", ErrInvalidScope, col, err)
			}
			n.condMap[col] = raw
		}
		js, err := json.Marshal(n.condMap) // map keys are sorted: canonical
		if err != nil {
			return normScope{}, fmt.Errorf("%w: %v", ErrInvalidScope, err)
		}
		n.condJSON = js
	}
	h := sha256.New()
	if n.resources == nil {
		h.Write([]byte("tide-scope-v1\x00"))
		h.Write([]byte(n.resource))
	} else {
		h.Write([]byte("tide-scopes-v1\x00"))
		h.Write([]byte(strings.Join(n.resources, "\x00")))
	}
	h.Write([]byte{0})
	if n.condJSON != nil {
		h.Write(n.condJSON)
	} else {
		h.Write([]byte("{}"))
	}
	n.digest = hex.EncodeToString(h.Sum(nil))
	return n, nil
}

// normalizeCondition returns the canonical JSON of one condition value.
func normalizeCondition(v any) (json.RawMessage, error) {
	x, err := toJSONValue(v)
	if err != nil {
		return nil, err
	}
	if m, ok := x.(map[string]any); ok {
		list, ok := m["in"].([]any)
		if len(m) != 1 || !ok {
			return nil, errors.New(`a condition is a scalar or {"in": [scalars]}`)
		}
		if len(list) == 0 {
			return nil, errors.New(`"in" needs at least one value`)
		}
		vals := make([]json.RawMessage, 0, len(list))
		for _, e := range list {
			raw, err := scalarJSON(e)
			if err != nil {
				return nil, fmt.Errorf(`"in": %v`, err)
			}
			vals = append(vals, raw)
		}
		slices.SortFunc(vals, func(a, b json.RawMessage) int { return bytes.Compare(a, b) })
		vals = slices.CompactFunc(vals, func(a, b json.RawMessage) bool { return bytes.Equal(a, b) })
		if len(vals) == 1 {
			return vals[0], nil
		}
		return json.Marshal(map[string][]json.RawMessage{"in": vals})
	}
	return scalarJSON(x)
}

// toJSONValue round-trips v through JSON so that any Go representation
// (int, json.Number, []string, map[string][]int, ...) is judged by the JSON
// it puts on the wire.
func toJSONValue(v any) (any, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var x any
	if err := dec.Decode(&x); err != nil {
		return nil, err
	}
	return x, nil
}

// scalarJSON returns the canonical JSON of a decoded scalar: a string, a
// bool or an integer.
func scalarJSON(x any) (json.RawMessage, error) {
	switch x := x.(type) {
	case string, bool:
		return json.Marshal(x)
	case json.Number:
		if !isInteger(x.String()) {
			return nil, fmt.Errorf("%s is not an integer; scope columns are strings, integers or booleans", x)
		}
		return json.RawMessage(x.String()), nil
	case nil:
		return nil, errors.New("null is not a condition value")
	}
	return nil, fmt.Errorf(`%T is not a scalar condition value; to match any of several values write {"in": [...]} (in Go: map[string]any{"in": values})`, x)
}

func isInteger(s string) bool {
	if len(s) > 0 && s[0] == '-' {
		s = s[1:]
	}
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// checkText applies the protocol's rules for identifiers: at most max bytes,
// valid UTF-8, no control characters.
func checkText(field, v string, max int) error {
	if len(v) > max {
		return fmt.Errorf("%s is longer than %d bytes", field, max)
	}
	if !utf8.ValidString(v) {
		return fmt.Errorf("%s is not valid UTF-8", field)
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] == 0x7f {
			return fmt.Errorf("%s contains a control character", field)
		}
	}
	return nil
}

// names returns the scope's resources.
func (n normScope) names() []string {
	if n.resources == nil {
		return []string{n.resource}
	}
	return n.resources
}

// rowKey is the key of a row of resource in a synced copy of the scope: the
// row's key, or for a scope of several resources the resource, a NUL byte
// and the key.
func (n normScope) rowKey(resource, key string) string {
	if n.resources == nil {
		return key
	}
	return resource + "\x00" + key
}

// has reports whether the scope follows resource.
func (n normScope) has(resource string) bool {
	if n.resources == nil {
		return resource == n.resource
	}
	return slices.Contains(n.resources, resource)
}

// scopeOf returns the scope a stored record describes.
func scopeOf(r Record) (Scope, error) {
	s := Scope{Resource: r.Resource, Resources: r.Resources}
	if len(r.Resources) > 0 {
		s.Resource = ""
	}
	if len(r.Conditions) > 0 {
		dec := json.NewDecoder(bytes.NewReader(r.Conditions))
		dec.UseNumber()
		if err := dec.Decode(&s.Conditions); err != nil {
			return Scope{}, fmt.Errorf("%w: stored conditions: %v", ErrInvalidScope, err)
		}
	}
	n, err := s.normalize()
	if err != nil {
		return Scope{}, err
	}
	if n.digest != r.Digest {
		return Scope{}, fmt.Errorf("%w: the stored record %s does not describe its scope", ErrInvalidScope, r.Digest)
	}
	return s, nil
}
