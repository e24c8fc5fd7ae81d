package core

import (
	"fmt"

	"github.com/tidesync/tide/core/protocol"
)

// RegisterRef registers the resource ref names, as Register does with
// r.Name set to ref.Name(): the server and its Go clients share ref, and
// its row type is r's. It returns an error wrapping ErrInvalidResource if
// r.Name is set to another name.
func RegisterRef[T any](e *Engine, ref protocol.ResourceRef[T], r Resource[T]) (*Table[T], error) {
	if r.Name != "" && r.Name != ref.Name() {
		return nil, fmt.Errorf("%w: register %s: Name %q is not the reference's name %q", ErrInvalidResource, r.Table, r.Name, ref.Name())
	}
	r.Name = ref.Name()
	return Register(e, r)
}

// AddMutatorRef declares the mutator ref names on t, as AddMutator does:
// ref's resource must be t's, and its argument type is m's.
func AddMutatorRef[T, A any](t *Table[T], ref protocol.MutatorRef[T, A], m Mutator[A]) error {
	if ref.Resource() != t.Name() {
		return fmt.Errorf("%w: mutator %s.%s: added to resource %s", ErrInvalidResource, ref.Resource(), ref.Name(), t.Name())
	}
	return AddMutator(t, ref.Name(), m)
}
