package protocol

// ResourceRef names a synced resource whose rows are of type T: one
// declaration, in a package both the server and its Go clients import,
// that the server registers (core.RegisterRef) and clients subscribe to
// and decode rows of (client.ScopeOf, client.RowsOf), so no resource name
// is written twice and a row type mismatch is a compile error.
//
//	var Todos = protocol.NewResourceRef[Todo]("todos")
type ResourceRef[T any] struct{ name string }

// NewResourceRef returns the reference of the resource named name, of row
// type T.
func NewResourceRef[T any](name string) ResourceRef[T] { return ResourceRef[T]{name} }

// Name returns the resource's wire name.
func (r ResourceRef[T]) Name() string { return r.name }

// MutatorRef names a mutator of a resource of row type T whose arguments
// are of type A, for the server (core.AddMutatorRef) and Go clients
// (client.MutateRef) to share.
//
//	var PutTodo = protocol.NewMutatorRef[Todo, PutArgs](Todos, "put")
type MutatorRef[T, A any] struct{ resource, name string }

// NewMutatorRef returns the reference of the mutator named name of
// resource r, with arguments of type A.
func NewMutatorRef[T, A any](r ResourceRef[T], name string) MutatorRef[T, A] {
	return MutatorRef[T, A]{r.name, name}
}

// Resource returns the mutator's resource name.
func (m MutatorRef[T, A]) Resource() string { return m.resource }

// Name returns the mutator's name.
func (m MutatorRef[T, A]) Name() string { return m.name }
