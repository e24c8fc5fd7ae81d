package client

import (
	"context"
	"fmt"
	"reflect"
	"slices"

	"github.com/tidesync/tide/core/protocol"
)

// ScopeOf returns the scope of resource ref with conditions, checked
// against ref's row type: each condition names one of its scope columns
// (tagged `tide:"…,scope"`). It returns an error wrapping ErrInvalidScope
// for a column that is not one, or a row type tide cannot sync.
func ScopeOf[T any](ref protocol.ResourceRef[T], conditions map[string]any) (Scope, error) {
	c, err := protocol.CodecFor(reflect.TypeFor[T]())
	if err != nil {
		return Scope{}, fmt.Errorf("%w: %s: %v", ErrInvalidScope, ref.Name(), err)
	}
	cols := c.Columns()
	scope := c.Scope()
	for name := range conditions {
		if !slices.ContainsFunc(scope, func(i int) bool { return cols[i].Name == name }) {
			return Scope{}, fmt.Errorf("%w: %s: %q is not a scope column of %v", ErrInvalidScope, ref.Name(), name, reflect.TypeFor[T]())
		}
	}
	s := Scope{Resource: ref.Name(), Conditions: conditions}
	if _, err := s.normalize(); err != nil {
		return Scope{}, err
	}
	return s, nil
}

// RowsOf returns the rows of resource ref in sub's scope by primary key
// (as Subscription.RowsOf holds them), decoded as ref's row type. It
// returns an error if a row does not decode.
func RowsOf[T any](sub *Subscription, ref protocol.ResourceRef[T]) (map[string]T, error) {
	raw := sub.RowsOf(ref.Name())
	if raw == nil {
		return nil, nil
	}
	out := make(map[string]T, len(raw))
	for k, row := range raw {
		v, err := protocol.DecodeRow[T](row)
		if err != nil {
			return nil, fmt.Errorf("client: %s row %q: %w", ref.Name(), k, err)
		}
		out[k] = v
	}
	return out, nil
}

// MutateRef runs the mutator ref names with args, as Mutate does with m
// (whose Resource, Name and Args it sets).
func MutateRef[T, A any](ctx context.Context, c *Client, ref protocol.MutatorRef[T, A], args A, m Mutation) (*PendingMutation, error) {
	m.Resource, m.Name, m.Args = ref.Resource(), ref.Name(), args
	return c.Mutate(ctx, m)
}
