package pgfeed

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
)

// Type OIDs the row rendering treats specially.
const (
	oidBytea       = 17
	oidDate        = 1082
	oidTimestamp   = 1114
	oidTimestamptz = 1184
	oidNumeric     = 1700
	// Arrays of them.
	oidDateArray        = 1182
	oidTimestampArray   = 1115
	oidTimestamptzArray = 1185
)

// timeFormat renders times as RFC 3339 in UTC with microseconds, which Go's
// time.Time decodes; the same text whichever session's TimeZone wrote it.
const timeFormat = `'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'`

// plan is what the feed derives from one resource's schema and its table's
// column types: the SQL rendering of rows, keys and scopes, shared by the
// capture trigger and the snapshot query so that both render a row
// identically.
type plan struct {
	s      *feed.Schema
	table  string    // quoted table name
	cols   []string  // quoted column names, in Schema.Columns order
	types  []uint32  // column type OIDs
	keys   []string  // quoted key columns, in Schema.Keys order
	scope  []string  // quoted scope columns
	resLit string    // resource name as a literal
	layout string    // what a change row's shape depends on
	upsert string    // Apply's upsert statement
	delete string    // Apply's delete statement
	snap   []snapCol // what a snapshot reads of a row, in JSON key order (rowjson.go)
	// snapSel is what a snapshot selects of a row: snap's expressions,
	// then the canonical text of the key and scope columns that are not
	// text columns (whose raw values are their text already).
	snapSel []string
	keyAt   int   // index in snapSel of the key's canonical text
	scopeAt []int // indexes in snapSel of the scope columns' text
}

// planFor returns the plan of s, reading its table's column types the first
// time.
func (f *Feed) planFor(ctx context.Context, s *feed.Schema) (*plan, error) {
	if p, ok := f.plans.Load(s); ok {
		return p.(*plan), nil
	}
	if err := validSchema(s); err != nil {
		return nil, err
	}
	types, err := f.columnTypes(ctx, f.pool, s)
	if err != nil {
		return nil, err
	}
	p := newPlan(s, types)
	actual, _ := f.plans.LoadOrStore(s, p)
	return actual.(*plan), nil
}

// querier is what planning needs from a pool or a connection.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// columnTypes returns the type OIDs of s's declared columns, in order, and
// an error naming any column the table lacks. A column of a domain has its
// base type's OID (through two levels of domains), so that it is rendered
// as its base type is.
func (f *Feed) columnTypes(ctx context.Context, q querier, s *feed.Schema) ([]uint32, error) {
	rows, err := q.Query(ctx, `SELECT a.attname::text, coalesce(b2.oid, b.oid, a.atttypid)::int8 FROM pg_catalog.pg_attribute a
JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_catalog.pg_type b ON t.typtype = 'd' AND b.oid = t.typbasetype
LEFT JOIN pg_catalog.pg_type b2 ON b.typtype = 'd' AND b2.oid = b.typbasetype
WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped`, tableIdent(s.Table))
	if err != nil {
		return nil, fmt.Errorf("pgfeed: %w", readColumnsError(ctx, q, s, err))
	}
	byName := map[string]uint32{}
	for rows.Next() {
		var name string
		var oid int64
		if err := rows.Scan(&name, &oid); err != nil {
			rows.Close()
			return nil, err
		}
		byName[name] = uint32(oid)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgfeed: %w", readColumnsError(ctx, q, s, err))
	}
	types := make([]uint32, len(s.Columns))
	var missing []string
	for i, c := range s.Columns {
		oid, ok := byName[c.Name]
		if !ok {
			missing = append(missing, c.Name)
		}
		types[i] = oid
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("pgfeed: resource %s: table %s has no column %s", s.Name, s.Table, strings.Join(missing, ", "))
	}
	return types, nil
}

// validSchema checks what the feed relies on: core validates schemas, but a
// feed may be handed one built by hand.
func validSchema(s *feed.Schema) error {
	if s == nil {
		return fmt.Errorf("%w: nil schema", feed.ErrInvalidMutation)
	}
	if err := validName(s.Name, 63); err != nil {
		return fmt.Errorf("pgfeed: resource name: %w", err)
	}
	parts := strings.Split(s.Table, ".")
	if len(parts) > 2 {
		return fmt.Errorf("pgfeed: resource %s: table %q is schema.name at most", s.Name, s.Table)
	}
	for _, p := range parts {
		if err := validName(p, 63); err != nil {
			return fmt.Errorf("pgfeed: resource %s: table: %w", s.Name, err)
		}
	}
	if len(s.Columns) == 0 || len(s.Keys) == 0 {
		return fmt.Errorf("pgfeed: resource %s: no key column", s.Name)
	}
	for _, c := range s.Columns {
		if err := validName(c.Name, 63); err != nil {
			return fmt.Errorf("pgfeed: resource %s: column: %w", s.Name, err)
		}
	}
	for i, ci := range s.Keys {
		if ci < 0 || ci >= len(s.Columns) || slices.Contains(s.Keys[:i], ci) {
			return fmt.Errorf("pgfeed: resource %s: key part %d is not a column, or is listed twice", s.Name, i)
		}
		if !s.Columns[ci].Kind.Keyable() {
			return fmt.Errorf("pgfeed: resource %s: key column %s of kind %s", s.Name, s.Columns[ci].Name, s.Columns[ci].Kind)
		}
	}
	for i, ci := range s.Scope {
		if ci < 0 || ci >= len(s.Columns) || !s.Columns[ci].Kind.Keyable() {
			return fmt.Errorf("pgfeed: resource %s: scope column %d is not a string, integer or bool column", s.Name, i)
		}
	}
	return nil
}

func newPlan(s *feed.Schema, types []uint32) *plan {
	p := &plan{s: s, table: tableIdent(s.Table), types: types, resLit: quoteLit(s.Name)}
	for _, c := range s.Columns {
		p.cols = append(p.cols, pgx.Identifier{c.Name}.Sanitize())
	}
	keyNames := make([]string, len(s.Keys))
	for i, ci := range s.Keys {
		p.keys = append(p.keys, p.cols[ci])
		keyNames[i] = s.Columns[ci].Name
	}
	for _, ci := range s.Scope {
		p.scope = append(p.scope, p.cols[ci])
	}

	// The layout: what the stored key, scope and row of a change mean. A
	// change of layout makes older changes of the resource unreadable
	// (Migrate moves the resource's floor).
	var lb strings.Builder
	fmt.Fprintf(&lb, "v1|%s|key=%s|scope=", s.Table, strings.Join(keyNames, ","))
	for i, ci := range s.Scope {
		if i > 0 {
			lb.WriteByte(',')
		}
		lb.WriteString(s.Columns[ci].Name)
	}
	lb.WriteString("|cols=")
	for i, c := range s.Columns {
		if i > 0 {
			lb.WriteByte(',')
		}
		fmt.Fprintf(&lb, "%s:%s:%d", c.Name, c.Kind, types[i])
	}
	p.layout = lb.String()

	// Apply's statements. The upsert reads the JSON row with
	// jsonb_populate_record, except bytea columns, which carry base64.
	sel := make([]string, len(p.cols))
	var set []string
	for i, c := range p.cols {
		if types[i] == oidBytea {
			sel[i] = "decode($1::jsonb->>" + quoteLit(s.Columns[i].Name) + ", 'base64')"
		} else {
			sel[i] = "r." + c
		}
		if !slices.Contains(s.Keys, i) {
			set = append(set, c+" = EXCLUDED."+c)
		}
	}
	if len(set) == 0 {
		set = []string{p.keys[0] + " = EXCLUDED." + p.keys[0]} // still an update, so still captured
	}
	p.upsert = "INSERT INTO " + p.table + " AS t (" + strings.Join(p.cols, ", ") + ") SELECT " + strings.Join(sel, ", ") +
		" FROM jsonb_populate_record(NULL::" + p.table + ", $1::jsonb) r ON CONFLICT (" + strings.Join(p.keys, ", ") + ") DO UPDATE SET " + strings.Join(set, ", ")
	match := make([]string, len(p.keys))
	for i, k := range p.keys {
		match[i] = k + " = $" + strconv.Itoa(i+1)
	}
	p.delete = "DELETE FROM " + p.table + " WHERE " + strings.Join(match, " AND ")
	p.snap = p.snapshotColumns()
	for _, c := range p.snap {
		p.snapSel = append(p.snapSel, c.expr)
	}
	textAt := func(col int) int {
		if typ := p.types[col]; typ == oidText || typ == oidVarchar {
			for j, c := range p.snap {
				if c.col == col {
					return j
				}
			}
		}
		p.snapSel = append(p.snapSel, "t."+p.cols[col]+"::text")
		return len(p.snapSel) - 1
	}
	if len(s.Keys) == 1 {
		p.keyAt = textAt(s.Keys[0])
	} else {
		p.snapSel = append(p.snapSel, p.keyExpr("t"))
		p.keyAt = len(p.snapSel) - 1
	}
	for _, ci := range s.Scope {
		p.scopeAt = append(p.scopeAt, textAt(ci))
	}
	return p
}

// valueExpr renders column i of the row alias as jsonb.
func (p *plan) valueExpr(alias string, i int) string {
	col := alias + "." + p.cols[i]
	switch k := p.s.Columns[i].Kind; k {
	case protocol.KindTime:
		switch p.types[i] {
		case oidTimestamptz, oidTimestamp, oidDate:
			return "to_jsonb(" + p.timeText(col, p.types[i]) + ")"
		}
	case protocol.KindBytes:
		if p.types[i] == oidBytea {
			return "to_jsonb(translate(encode(" + col + ", 'base64'), E'\\n', ''))"
		}
	case protocol.KindDecimal, protocol.KindText:
		switch p.types[i] {
		case oidNumeric, oidInt2, oidInt4, oidInt8:
			// The number's text as a JSON string: exact, where to_jsonb
			// would make it a JSON number.
			return "to_jsonb(" + col + "::text)"
		}
		// Other types' to_jsonb is the JSON string of their output
		// (inet's, unlike its cast to text, without a /32).
	case protocol.KindArray | protocol.KindDecimal:
		return "to_jsonb(" + col + "::text[])"
	case protocol.KindArray | protocol.KindTime:
		var el uint32
		switch p.types[i] {
		case oidTimestamptzArray:
			el = oidTimestamptz
		case oidTimestampArray:
			el = oidTimestamp
		case oidDateArray:
			el = oidDate
		}
		if el != 0 {
			// Each element as a KindTime column renders, in order, a NULL
			// element as null; a NULL array as NULL.
			return "CASE WHEN " + col + " IS NULL THEN NULL ELSE to_jsonb(ARRAY(SELECT " + p.timeText("u.e", el) +
				" FROM unnest(" + col + ") WITH ORDINALITY u(e, o) ORDER BY u.o)) END"
		}
	}
	return "to_jsonb(" + col + ")"
}

// timeText renders expr, a value of type typ (timestamptz, timestamp or
// date) for a KindTime field, as text in timeFormat.
func (p *plan) timeText(expr string, typ uint32) string {
	switch typ {
	case oidTimestamptz:
		return "to_char(" + expr + " AT TIME ZONE 'UTC', " + timeFormat + ")"
	case oidDate:
		return "to_char(" + expr + "::timestamp, " + timeFormat + ")"
	}
	return "to_char(" + expr + ", " + timeFormat + ")"
}

// rowExpr renders the declared columns of the row alias as a JSON object.
// jsonb_build_object takes at most 100 arguments, so wide rows are built in
// chunks and concatenated.
func (p *plan) rowExpr(alias string) string {
	all := make([]int, len(p.cols))
	for i := range all {
		all[i] = i
	}
	return p.objectExpr(alias, all)
}

// prevExpr renders the row alias's previous-version object: the columns the
// resource's row filter reads (feed.Schema.PrevColumns).
func (p *plan) prevExpr(alias string) string { return p.objectExpr(alias, p.s.PrevColumns) }

// objectExpr renders the row alias's columns cols as a jsonb object, in
// chunks of 50 (jsonb_build_object takes at most 100 arguments).
func (p *plan) objectExpr(alias string, cols []int) string {
	var parts []string
	for start := 0; start < len(cols); start += 50 {
		var args []string
		for _, i := range cols[start:min(start+50, len(cols))] {
			args = append(args, quoteLit(p.s.Columns[i].Name), p.valueExpr(alias, i))
		}
		parts = append(parts, "jsonb_build_object("+strings.Join(args, ", ")+")")
	}
	return strings.Join(parts, " || ")
}

// keyExpr renders the canonical text of the row alias's key (see
// protocol.EncodeKey): Postgres's text output of the key column, which
// equals core's canonical text for text, integer and boolean columns; for
// a composite key, the JSON array of its columns' texts, each a JSON
// string as to_json writes it (which escapes exactly as EncodeKey does),
// with no spaces.
func (p *plan) keyExpr(alias string) string {
	if len(p.keys) == 1 {
		return alias + "." + p.keys[0] + "::text"
	}
	parts := make([]string, len(p.keys))
	for i, k := range p.keys {
		parts[i] = "pg_catalog.to_json(" + alias + "." + k + "::text)::text"
	}
	return "('[' || " + strings.Join(parts, " || ',' || ") + " || ']')"
}

// keyOrder renders the snapshot order of the row alias: by its key
// columns, in declared order, which the primary key makes total.
func (p *plan) keyOrder(alias string) string {
	cols := make([]string, len(p.keys))
	for i, k := range p.keys {
		cols[i] = alias + "." + k
	}
	return strings.Join(cols, ", ")
}

// afterKey returns the condition selecting the rows of the alias t whose
// key comes after key in keyOrder, adding its parameters to args.
func (p *plan) afterKey(key string, args []any) (string, []any, error) {
	parts, err := p.s.KeyParts(key)
	if err != nil {
		return "", args, fmt.Errorf("pgfeed: resource %s: snapshot after key %q: %w", p.s.Name, key, err)
	}
	params := make([]string, len(parts))
	for i, v := range parts {
		args = append(args, v)
		params[i] = "$" + strconv.Itoa(len(args))
	}
	if len(parts) == 1 {
		return "t." + p.keys[0] + " > " + params[0], args, nil
	}
	return "(" + p.keyOrder("t") + ") > (" + strings.Join(params, ", ") + ")", args, nil
}

// scopeExpr renders the canonical text of the row alias's scope columns.
func (p *plan) scopeExpr(alias string) string {
	if len(p.scope) == 0 {
		return "'{}'::text[]"
	}
	parts := make([]string, len(p.scope))
	for i, c := range p.scope {
		parts[i] = alias + "." + c + "::text"
	}
	return "ARRAY[" + strings.Join(parts, ", ") + "]::text[]"
}

// captureFunc returns the name (unqualified) of the resource's capture
// function.
func captureFunc(resource string) string { return shortIdent("capture_" + resource) }

// triggerName returns the name of the resource's capture trigger on its
// table, unique per tide schema and resource.
func (f *Feed) triggerName(resource string) string {
	return shortIdent(f.opts.Schema + "_capture_" + resource)
}

// truncateTrigger returns the name of the trigger refusing TRUNCATE.
func (f *Feed) truncateTrigger() string { return shortIdent(f.opts.Schema + "_no_truncate") }

// captureDDL returns the statements installing the capture of p's resource,
// in order.
//
// The capture writes each row event into the change log, where it stays:
// no position, no lock, no shared row, no notification, so synced
// transactions never wait for one another. It counts the transaction's
// changes (ord) in a transaction-local setting. The sequencer gives the
// changes their positions once they have committed (see ticks.go).
func (f *Feed) captureDDL(p *plan) []string {
	n := f.n
	fn := n.schema + "." + pgx.Identifier{captureFunc(p.s.Name)}.Sanitize()
	prevs := len(p.s.PrevColumns) > 0
	cols := "ord, resource, op, key, scope, data, origin"
	if prevs {
		cols += ", prev"
	}
	target := n.changes + " (" + cols + ") VALUES (k, "
	after := " k := k + 1;"
	if f.opts.brokenCapture {
		// Broken on purpose: a position taken when the row is written,
		// in no commit order, as a tick of its own.
		after = `
    INSERT INTO ` + n.ticks + ` (pos, next, xids, firsts, snap) SELECT s.p, s.p + 1, ARRAY[pg_catalog.pg_current_xact_id()], ARRAY[s.p - k], pg_catalog.pg_current_snapshot() FROM (SELECT pg_catalog.nextval(` + n.seqLit + `) AS p) s
      ON CONFLICT (pos) DO NOTHING;
    PERFORM pg_catalog.pg_notify(` + quoteLit(n.channel) + `, '');
    k := k + 1;`
	}
	// prev is the previous version of an upserted row in its scope, for a
	// resource with a row filter: the columns the filter reads, JSON null
	// for none (NULL for a delete).
	insert := func(op int, alias, prev string) string {
		if !prevs {
			prev = ""
		} else if op == int(feed.OpDelete) {
			prev = ", NULL"
		} else {
			prev = ", " + prev
		}
		return "INSERT INTO " + target + p.resLit + ", " + strconv.Itoa(op) + ", " + p.keyExpr(alias) + ", " + p.scopeExpr(alias) + ", " + p.rowExpr(alias) + ", o" + prev + ");" + after
	}
	const none = "'null'::jsonb"
	body := `
DECLARE
  o text := nullif(pg_catalog.current_setting('tide.origin', true), '');
  k integer := ` + n.nextOrd() + `;
BEGIN
  IF TG_OP = 'DELETE' THEN
    ` + insert(int(feed.OpDelete), "OLD", "") + `
  ELSIF TG_OP = 'UPDATE' THEN
    IF ` + p.keyExpr("OLD") + ` IS DISTINCT FROM ` + p.keyExpr("NEW") + ` OR ` + p.scopeExpr("OLD") + ` IS DISTINCT FROM ` + p.scopeExpr("NEW") + ` THEN
      ` + insert(int(feed.OpDelete), "OLD", "") + `
      ` + insert(int(feed.OpUpsert), "NEW", none) + `
    ELSE
      ` + insert(int(feed.OpUpsert), "NEW", p.prevExpr("OLD")) + `
    END IF;
  ELSE
    ` + insert(int(feed.OpUpsert), "NEW", none) + `
  END IF;
  ` + n.saveOrd("k") + `
  RETURN NULL;
END`
	trig := pgx.Identifier{f.triggerName(p.s.Name)}.Sanitize()
	create := "CREATE CONSTRAINT TRIGGER " + trig + " AFTER INSERT OR UPDATE OR DELETE ON " + p.table +
		" DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION " + fn + "()"
	if f.opts.brokenCapture {
		create = "CREATE TRIGGER " + trig + " AFTER INSERT OR UPDATE OR DELETE ON " + p.table + " FOR EACH ROW EXECUTE FUNCTION " + fn + "()"
	}
	stmts := []string{
		"CREATE OR REPLACE FUNCTION " + fn + "() RETURNS trigger LANGUAGE plpgsql AS $tide$" + body + "\n$tide$",
		"DROP TRIGGER IF EXISTS " + trig + " ON " + p.table,
		create,
		"CREATE OR REPLACE TRIGGER " + pgx.Identifier{f.truncateTrigger()}.Sanitize() + " BEFORE TRUNCATE ON " + p.table +
			" FOR EACH STATEMENT EXECUTE FUNCTION " + n.schema + ".refuse_truncate()",
	}
	// The first scope column is the log's index's (changes_tx); each
	// further one has an index of its own, which gives a transaction's
	// changes of a value in order.
	for i := 1; i < len(p.scope); i++ {
		idx := pgx.Identifier{shortIdent("changes_" + p.s.Name + "_s" + strconv.Itoa(i+1))}.Sanitize()
		stmts = append(stmts, "CREATE INDEX IF NOT EXISTS "+idx+" ON "+n.changes+" ((scope["+strconv.Itoa(i+1)+"]), xid, ord) WHERE resource = "+p.resLit)
	}
	return stmts
}

// installHash identifies the DDL of a capture, so Migrate reinstalls it only
// when it changed.
func installHash(stmts []string) string {
	h := sha256.New()
	for _, s := range stmts {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}
