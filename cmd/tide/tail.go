package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"strings"

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
		pool, f, err := e.connect(pgfeed.Options{})
		if err != nil {
			return err
		}
		defer pool.Close()
		defer f.Close()
		var after feed.Position
		if *from >= 0 {
			after = feed.Position(*from)
		} else if after, err = f.Head(e.ctx); err != nil {
			return err
		}
		var want []string
		if *scope != "" {
			want = strings.Split(*scope, ",")
		}
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
