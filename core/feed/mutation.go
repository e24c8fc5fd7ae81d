package feed

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Validate reports what is wrong with m for a Writer, or nil: a schema
// without a name, an unknown op, or an upsert whose scope values do not
// match the schema or whose row is not a JSON object, or a key that is
// not the canonical text of a composite key of the schema. Scope and Row of a
// delete are not looked at. Writers wrap its error in ErrInvalidMutation.
func (m Mutation) Validate() error {
	if m.Schema == nil {
		return errors.New("nil Schema")
	}
	if m.Schema.Name == "" {
		return errors.New("Schema has no Name")
	}
	if len(m.Schema.Keys) > 1 {
		if _, err := m.Schema.KeyParts(m.Key); err != nil {
			return fmt.Errorf("%s %q: %w", m.Schema.Name, m.Key, err)
		}
	}
	switch m.Op {
	case OpDelete:
		return nil
	case OpUpsert:
	default:
		return fmt.Errorf("%s %q: invalid op %d", m.Schema.Name, m.Key, m.Op)
	}
	if len(m.Scope) != len(m.Schema.Scope) {
		return fmt.Errorf("%s %q: upsert has %d scope values, schema declares %d", m.Schema.Name, m.Key, len(m.Scope), len(m.Schema.Scope))
	}
	if len(m.Row) == 0 {
		return fmt.Errorf("%s %q: upsert without a row", m.Schema.Name, m.Key)
	}
	if !json.Valid(m.Row) {
		return fmt.Errorf("%s %q: row is not valid JSON", m.Schema.Name, m.Key)
	}
	if trimmed := bytes.TrimLeft(m.Row, " \t\r\n"); trimmed[0] != '{' {
		return fmt.Errorf("%s %q: row is not a JSON object", m.Schema.Name, m.Key)
	}
	return nil
}
