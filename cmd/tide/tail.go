package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/pgfeed"
)

// change is one line of tide tail --json.
type change struct {
	Pos      int64           `json:"pos"`
	Resource string          `json:"resource"`
	Op       string          `json:"op"`
	Key      string          `json:"key"`
	Scope    []string        `json:"scope"`
	Row      json.RawMessage `json:"row,omitempty"`
	Origin   string          `json:"origin,omitempty"`
}

func tailFlags(fs *flag.FlagSet) func(*env) error {
	resource := fs.String("resource", "", "only changes of this resource")
	scope := fs.String("scope", "", "only changes whose scope values are these (comma-separated, in the resource's scope-column order)")
	from := fs.Int64("from", -1, "print changes after this position (default: the head, so only new ones)")
	count := fs.Int("n", 0, "exit after printing this many changes (default: follow until interrupted)")
	return func(e *env) error {
		if *count < 0 {
			return usageError{fmt.Sprintf("-n %d: a count is 0 (follow) or more", *count)}
		}
		if *from < -1 {
			return usageError{fmt.Sprintf("--from %d: a position is 0 or more", *from)}
		}
		pool, f, err := e.connect(pgfeed.Options{})
		if err != nil {
			return err
		}
		defer pool.Close()
		defer f.Close()
		if err := e.installed(pool); err != nil {
			return err
		}
		var want []string
		if *scope != "" {
			want = strings.Split(*scope, ",")
		}
		resources, err := e.scopeColumns(pool)
		if err != nil {
			return err
		}
		if *resource != "" {
			cols, ok := resources[*resource]
			if !ok {
				return fmt.Errorf("unknown resource %q (resources: %s)", *resource, listResources(resources, false))
			}
			if want != nil && len(want) != len(cols) {
				return fmt.Errorf("--scope %q has %d values; resource %s has %d scope columns (%s)", *scope, len(want), *resource, len(cols), strings.Join(cols, ", "))
			}
		} else if want != nil {
			fits := false
			for _, cols := range resources {
				fits = fits || len(cols) == len(want)
			}
			if !fits {
				return fmt.Errorf("--scope %q has %d values: no resource has %d scope columns (%s)", *scope, len(want), len(want), listResources(resources, true))
			}
		}
		head, err := f.Head(e.ctx)
		if err != nil {
			return err
		}
		after := head
		if *from >= 0 {
			after = feed.Position(*from)
			if after > head {
				return fmt.Errorf("--from %d is beyond the head %d: no change has that position yet", after, head)
			}
			floor, err := f.Floor(e.ctx)
			if err != nil {
				return err
			}
			if after < floor {
				return fmt.Errorf("--from %d is below the floor %d: the changes up to the floor were pruned (use --from %d or more)", after, floor, floor)
			}
		}
		// Standard output carries only changes; the database is named here.
		fmt.Fprintf(e.err, "tide tail: %s, schema %s, changes after position %d\n", e.db, e.schema, after)
		printed := 0
		for *count == 0 || printed < *count {
			changes, err := f.Tail(e.ctx, after, 1000)
			if err != nil {
				if e.ctx.Err() != nil {
					return nil // interrupted: a normal end for a follower
				}
				return err
			}
			for _, c := range changes {
				after = c.Pos
				if *resource != "" && c.Resource != *resource || want != nil && !equal(c.Scope, want) {
					continue
				}
				if err := e.printChange(c); err != nil {
					return err
				}
				if printed++; *count > 0 && printed == *count {
					break
				}
			}
		}
		return nil
	}
}

// scopeColumns returns each resource's scope columns as tide's schema
// records them.
func (e *env) scopeColumns(pool *pgxpool.Pool) (map[string][]string, error) {
	rows, err := pool.Query(e.ctx, "SELECT name, layout FROM "+e.quoted("resources"))
	if err != nil {
		return nil, fmt.Errorf("reading resources: %w", err)
	}
	defer rows.Close()
	res := map[string][]string{}
	for rows.Next() {
		var name, layout string
		if err := rows.Scan(&name, &layout); err != nil {
			return nil, err
		}
		res[name] = layoutScope(layout)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading resources: %w", err)
	}
	return res, nil
}

// listResources names the resources, with their scope columns if cols.
func listResources(resources map[string][]string, cols bool) string {
	if len(resources) == 0 {
		return "none: no resource is installed (the app's first start installs them)"
	}
	var names []string
	for name, c := range resources {
		if cols {
			name += ": " + strings.Join(c, ",")
		}
		names = append(names, name)
	}
	slices.Sort(names)
	return strings.Join(names, "; ")
}

// layoutScope returns the scope columns a resource's recorded layout
// names ("v1|table|key=id|scope=a,b|cols=...").
func layoutScope(layout string) []string {
	for _, part := range strings.Split(layout, "|") {
		if v, ok := strings.CutPrefix(part, "scope="); ok {
			if v == "" {
				return nil
			}
			return strings.Split(v, ",")
		}
	}
	return nil
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func (e *env) printChange(c feed.Change) error {
	op := "upsert"
	if c.Op == feed.OpDelete {
		op = "delete"
	}
	if e.json {
		return e.printJSON(change{Pos: int64(c.Pos), Resource: c.Resource, Op: op, Key: c.Key, Scope: c.Scope, Row: c.Row, Origin: c.Origin})
	}
	_, err := fmt.Fprintf(e.out, "%d\t%s\t%s\t%s\t[%s]\t%s\n", c.Pos, c.Resource, op, c.Key, strings.Join(c.Scope, ","), c.Row)
	return err
}
