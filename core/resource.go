package core

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/internal/text"
)

// Resource declares a synced table backed by the struct type T. T's fields
// tagged `tide:"column"` are its columns; those tagged `tide:"column,pk"`
// are its primary key, and any number `tide:"column,scope"` (the columns a
// subscription's conditions may name):
//
//	type Todo struct {
//		ID        string    `tide:"id,pk"`
//		ProjectID string    `tide:"project_id,scope"`
//		Title     string    `tide:"title"`
//		UpdatedAt time.Time `tide:"updated_at"`
//	}
//
// A table whose primary key spans several columns tags each of them pk,
// in the key's order; a column may be both a key part and a scope column:
//
//	type Member struct {
//		UserID  string `tide:"user_id,pk"`
//		BoardID string `tide:"board_id,pk,scope"`
//		Role    string `tide:"role"`
//	}
//
// A row's key is one text on the wire, in cursors and in clients' stores:
// a single key column's value as it is (integers in decimal, bools "true"
// or "false"), a composite key the JSON array of its parts' texts,
// ["u1","b7"] (see protocol.EncodeKey; clients build it with client.Key).
//
// Supported field types (docs/protocol.md lists each one's wire form and
// the Postgres column types it fits):
//
//   - string and named string types (text, varchar, char, enum, uuid,
//     inet, cidr and interval columns, and domains over them), bool,
//     signed and unsigned integers, floats, time.Time (microseconds),
//     []byte, json.RawMessage;
//   - protocol.Decimal for numeric columns: the exact canonical text,
//     "12.30", never a float;
//   - a type implementing encoding.TextMarshaler and (on its pointer)
//     encoding.TextUnmarshaler, such as netip.Addr or a decimal package's
//     type: its text is the column's Postgres text (a named string,
//     integer, float or bool type keeps its kind, whatever its methods);
//   - slices of the scalar types above (not []byte) and of protocol.Decimal
//     and time.Time, for one-dimensional array columns, with pointer
//     elements ([]*int64) where NULL elements must stay NULL;
//   - pointers to the scalar types for nullable columns (a nil slice is
//     NULL as it is).
//
// Primary key and scope columns are strings, integers or bools and not
// pointers. Untagged fields are not synced.
type Resource[T any] struct {
	// Name is the resource's name on the wire. Zero value: the table name
	// without its schema qualifier.
	Name string
	// Table is the table name, optionally schema-qualified ("app.todos").
	// Required.
	Table string
	// Authorize decides who may subscribe to which scopes. It runs once per
	// subscribe and poll request, after the conditions were validated and
	// after the principal's token grants (authz.CheckGrants) allowed the
	// scope. Zero value: every subscription is refused (deny by default). A
	// policy that panics denies with "unavailable".
	Authorize authz.Policy
	// Filter decides row by row what a principal sees of the scopes its
	// policy allowed, in snapshots, replays and live changes: a row it
	// rejects is left out of a snapshot, and sent as a delete (without
	// origin) wherever the subscriber may hold an older version of it. See
	// authz.RowFilter for the rules a filter must follow. Zero value: every
	// row of an allowed scope is visible.
	Filter authz.RowFilter[T]
	// FilterColumns names the columns Filter reads. A feed that records
	// the previous version of a changed row (to send a hidden upsert's
	// delete only to those who saw the version before) may then keep only
	// these columns of it (feed.Schema.PrevColumns), and the engine may
	// decode only these columns of the rows it filters, which is cheaper;
	// a filter that reads another column could see its zero value, so
	// list every column it reads. Register refuses a name that is not a
	// column, a name listed twice, or FilterColumns without Filter. Zero
	// value: every column.
	FilterColumns []string
	// ColumnPolicies restricts columns, by name, to the principals their
	// policy allows (see authz.ColumnPolicy): a principal a column's
	// policy refuses for a row receives that row without the column (the
	// member is absent, not null), in snapshots, replays, live changes,
	// polls and mutation acks, and an upsert that changed only columns it
	// may not see does not reach it. A row Filter hides comes first: a
	// visible row is then trimmed. A policy reads the whole row, so a
	// feed records the whole previous version of the resource's changed
	// rows (feed.Schema.PrevColumns), which is what lets it tell which
	// columns changed. Register refuses a name that is not a column, the
	// primary key or a scope column (they are on the wire whatever the
	// policy), a nil policy, and more than 64 policies. Zero value: every
	// column is visible to whoever sees the row.
	ColumnPolicies map[string]authz.ColumnPolicy[T]
	// DependsOn lists the synced resources whose rows Authorize reads (a
	// todos policy that looks up memberships). When a change of one of
	// them commits, every node runs the policy again for the subscriptions
	// the change may concern, and ends those it now denies as Reauthorize
	// does, with no call from the app (see Dependency for how a change is
	// narrowed to the subscriptions it concerns, and docs/authorization.md
	// for the bound). Register refuses a wrong list with a
	// *DependencyError. Zero value: the policy depends on nothing but the
	// principal and the conditions; call Reauthorize when what it reads
	// changes.
	DependsOn []Dependency
}

// resource is the engine's untyped view of a registered resource.
type resource struct {
	schema *feed.Schema
	codec  *protocol.RowCodec
	policy authz.Policy    // guarded: token grants first, panics recovered; nil denies
	filter *rowFilter      // nil: every row is visible
	cols   *columnPolicies // nil: every column is visible

	mutators map[string]*mutator // guarded by Engine.mu

	dependsOn []Dependency  // as declared; resolved by addResource
	followGen atomic.Uint64 // moves when a change of a resource it depends on is noted (follower.go)
}

// Table is a registered resource. Its write methods write through the
// engine's feed when the feed accepts writes (the in-memory feed does; with
// Postgres, apps usually write with their own SQL and tide captures it).
// A Table is safe for concurrent use.
type Table[T any] struct {
	e   *Engine
	res *resource
}

// Register declares a resource on the engine. It validates the struct and
// returns an error wrapping protocol.ErrNoPrimaryKey, protocol.ErrBadTag, protocol.ErrUnsupportedType,
// ErrInvalidResource or ErrDuplicateResource when the declaration is wrong
// (a wrong DependsOn is a *DependencyError, which wraps ErrInvalidResource).
// Resources may be registered before or after the engine starts serving.
func Register[T any](e *Engine, r Resource[T]) (*Table[T], error) {
	c, err := protocol.CodecFor(reflect.TypeFor[T]())
	if err != nil {
		return nil, fmt.Errorf("tide: register %s: %w", r.Table, err)
	}
	if r.Table == "" {
		return nil, fmt.Errorf("%w: register %s: Table is required", ErrInvalidResource, reflect.TypeFor[T]())
	}
	for _, part := range strings.Split(r.Table, ".") {
		if err := text.ValidIdent(part); err != nil {
			return nil, fmt.Errorf("%w: register %s: table: %v", ErrInvalidResource, r.Table, err)
		}
	}
	if strings.Count(r.Table, ".") > 1 {
		return nil, fmt.Errorf("%w: register %s: table is schema.name at most", ErrInvalidResource, r.Table)
	}
	name := r.Name
	if name == "" {
		name = r.Table[strings.LastIndexByte(r.Table, '.')+1:]
	}
	if err := text.ValidIdent(name); err != nil {
		return nil, fmt.Errorf("%w: register %s: name: %v", ErrInvalidResource, r.Table, err)
	}
	schema := &feed.Schema{Name: name, Table: r.Table, Columns: c.Columns(), Keys: c.Keys(), Scope: c.Scope(), Type: reflect.TypeFor[T]().String()}
	res := &resource{schema: schema, codec: c, policy: guardPolicy(r.Authorize), dependsOn: slices.Clone(r.DependsOn)}
	if len(r.FilterColumns) > 0 && r.Filter == nil {
		return nil, fmt.Errorf("%w: register %s: FilterColumns without a Filter", ErrInvalidResource, r.Table)
	}
	policed, err := policedColumns(schema, r.ColumnPolicies)
	if err != nil {
		return nil, fmt.Errorf("%w: register %s: ColumnPolicies: %v", ErrInvalidResource, r.Table, err)
	}
	var dec *rowDecoder
	if r.Filter != nil {
		cols, err := filterColumns(schema, r.FilterColumns)
		if err != nil {
			return nil, fmt.Errorf("%w: register %s: FilterColumns: %v", ErrInvalidResource, r.Table, err)
		}
		if len(policed) > 0 {
			// Column policies read any column, and compare every
			// column of a row with its previous version.
			cols, _ = filterColumns(schema, nil)
		}
		schema.PrevColumns = cols
		fc := c
		if len(cols) < len(schema.Columns) {
			fc = c.Only(cols) // the filter reads no other column: skip what can be
		}
		dec = newRowDecoder[T](fc, e.cfg.Logger.With("resource", name))
		res.filter = newRowFilter(dec, r.Filter)
	}
	if len(policed) > 0 {
		if dec == nil {
			schema.PrevColumns, _ = filterColumns(schema, nil)
			dec = newRowDecoder[T](c, e.cfg.Logger.With("resource", name))
		}
		res.cols = newColumnPolicies(schema, dec, policed, r.ColumnPolicies)
	}
	if dec != nil {
		for _, i := range schema.PrevColumns {
			dec.prevCols = append(dec.prevCols, schema.Columns[i].Name)
		}
	}
	if err := e.addResource(res); err != nil {
		return nil, err
	}
	return &Table[T]{e: e, res: res}, nil
}

// filterColumns returns the indexes of the named columns in declared
// order, or of every column if names is empty.
func filterColumns(s *feed.Schema, names []string) ([]int, error) {
	want := map[string]bool{}
	for _, n := range names {
		if want[n] {
			return nil, fmt.Errorf("column %q is listed twice", n)
		}
		want[n] = true
	}
	var out []int
	for i, col := range s.Columns {
		if len(names) == 0 || want[col.Name] {
			out = append(out, i)
			delete(want, col.Name)
		}
	}
	for _, n := range names {
		if want[n] {
			return nil, fmt.Errorf("%q is not a column", n)
		}
	}
	return out, nil
}

// Name returns the resource's wire name.
func (t *Table[T]) Name() string { return t.res.schema.Name }

// Schema returns a copy of the resource's schema: its table, columns, key
// and scope columns as the engine and the feed see them.
func (t *Table[T]) Schema() *feed.Schema {
	s := *t.res.schema
	s.Columns = append([]protocol.Column(nil), s.Columns...)
	s.Keys = slices.Clone(s.Keys)
	s.Scope = append([]int(nil), s.Scope...)
	s.PrevColumns = slices.Clone(s.PrevColumns)
	return &s
}

// Upsert writes rows atomically: each row is inserted, or replaces the row
// with the same primary key. A row whose scope columns changed moves between
// scopes (a delete for the old scope, an upsert for the new). The write
// carries the client origin of ctx (the request's, under package
// middleware; see WithOrigin). It returns ErrNotWritable if
// the feed does not accept writes.
func (t *Table[T]) Upsert(ctx context.Context, rows ...T) error {
	muts, err := t.upserts(rows)
	if err != nil {
		return err
	}
	return t.apply(ctx, muts)
}

// upserts encodes rows as upsert mutations.
func (t *Table[T]) upserts(rows []T) ([]feed.Mutation, error) {
	muts := make([]feed.Mutation, len(rows))
	for i, row := range rows {
		key, scope, js, err := t.res.codec.Encode(reflect.ValueOf(row))
		if err != nil {
			return nil, fmt.Errorf("tide: upsert %s: %w", t.Name(), err)
		}
		muts[i] = feed.Mutation{Schema: t.res.schema, Op: feed.OpUpsert, Key: key, Scope: scope, Row: js}
	}
	return muts, nil
}

// Delete deletes the rows with the primary keys of rows atomically; other
// fields are ignored. Deleting a missing row is not an error.
func (t *Table[T]) Delete(ctx context.Context, rows ...T) error {
	return t.apply(ctx, t.deletes(rows))
}

// deletes encodes rows as delete mutations by primary key.
func (t *Table[T]) deletes(rows []T) []feed.Mutation {
	muts := make([]feed.Mutation, len(rows))
	for i, row := range rows {
		muts[i] = feed.Mutation{Schema: t.res.schema, Op: feed.OpDelete, Key: t.res.codec.KeyOf(reflect.ValueOf(row))}
	}
	return muts
}

func (t *Table[T]) apply(ctx context.Context, muts []feed.Mutation) error {
	w, ok := t.e.feed.(feed.Writer)
	if !ok {
		return ErrNotWritable
	}
	if len(muts) == 0 {
		return nil
	}
	return w.Apply(ctx, OriginFrom(ctx), muts...)
}

// Rows returns the current rows of a scope, read from the feed without any
// policy: conditions are as in a subscribe frame (column name to a value or
// {"in": [values]}), nil for the whole resource. It is for the app's own use
// (and tests); clients read through subscriptions. A scope larger than
// MaxPageSize is read in several pages, each consistent on its own.
func (t *Table[T]) Rows(ctx context.Context, conditions map[string]any) ([]T, error) {
	raw := make(map[string]json.RawMessage, len(conditions))
	for k, v := range conditions {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("tide: condition %s: %w", k, err)
		}
		raw[k] = b
	}
	sc, cerr := parseConditions(t.res.schema, raw, protocol.MaxConditionsN, 1<<16)
	if cerr != nil {
		return nil, cerr
	}
	var out []T
	q := feed.SnapshotQuery{Scope: sc, Limit: t.e.cfg.MaxPageSize}
	for {
		pg, err := t.e.feed.Snapshot(ctx, q)
		if err != nil {
			return nil, err
		}
		for _, c := range pg.Rows {
			row, err := t.Decode(c.Row)
			if err != nil {
				return nil, err
			}
			out = append(out, row)
		}
		if len(pg.Rows) < q.Limit {
			return out, nil
		}
		q.After, q.HasAfter = pg.Rows[len(pg.Rows)-1].Key, true
	}
}

// Decode decodes a JSON row of this resource into a T.
func (t *Table[T]) Decode(row json.RawMessage) (T, error) {
	var out T
	err := t.res.codec.Decode(row, reflect.ValueOf(&out).Elem())
	return out, err
}

type originKey struct{}

// WithOrigin returns a copy of ctx carrying origin, the client origin (the
// id of the client device) of the writes made with it, so that device skips
// their echo: Table's writes and tide.Begin's transactions read it. An app
// serving requests does not call it: package middleware puts each
// request's client origin (its Tide-Origin header) in the request's
// context. Call it where no request carries one: a test, or a job writing
// for a device.
func WithOrigin(ctx context.Context, origin string) context.Context {
	return context.WithValue(ctx, originKey{}, origin)
}

// OriginFrom returns the client origin set by WithOrigin, or "".
func OriginFrom(ctx context.Context) string {
	s, _ := ctx.Value(originKey{}).(string)
	return s
}
