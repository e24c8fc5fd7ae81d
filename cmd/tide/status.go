package main

import (
	"flag"
	"fmt"
	"hash/crc32"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/core/feed/replicator"
)

// status is what tide status reports.
type status struct {
	Schema        string           `json:"schema"`
	Version       int              `json:"version"`
	LatestVersion int              `json:"latest_version"`
	Epoch         string           `json:"epoch"`
	Head          int64            `json:"head"`
	Floor         int64            `json:"floor"`
	Changes       int64            `json:"changes"`
	Bytes         int64            `json:"bytes"`
	NewestCommit  *time.Time       `json:"newest_commit,omitempty"`
	Resources     []resourceStatus `json:"resources"`
	Replicator    *lockHolder      `json:"replicator"` // nil: no node holds the role
}

type resourceStatus struct {
	Name    string `json:"name"`
	Table   string `json:"table"`
	Floor   int64  `json:"floor"`
	Changes int64  `json:"changes"`
}

// lockHolder is the Postgres session holding an advisory lock.
type lockHolder struct {
	PID         int32      `json:"pid"`
	Application string     `json:"application"`
	Client      string     `json:"client,omitempty"`
	Since       *time.Time `json:"since,omitempty"`
}

func statusFlags(fs *flag.FlagSet) func(*env) error {
	return func(e *env) error {
		pool, f, err := e.connect(pgfeed.Options{})
		if err != nil {
			return err
		}
		defer pool.Close()
		defer f.Close()
		st := status{Schema: e.schema, LatestVersion: pgfeed.SchemaVersion(), Resources: []resourceStatus{}}
		if st.Version, err = e.schemaVersion(pool); err != nil {
			return err
		}
		if st.Version == 0 {
			return fmt.Errorf("schema %q is not installed: run tide migrate", e.schema)
		}
		head, err := f.Head(e.ctx)
		if err != nil {
			return err
		}
		floor, err := f.Floor(e.ctx)
		if err != nil {
			return err
		}
		st.Head, st.Floor, st.Epoch = int64(head), int64(floor), f.Epoch()
		var newest *time.Time
		err = pool.QueryRow(e.ctx, `SELECT count(*), pg_total_relation_size($1::regclass), max(committed_at) FROM `+e.quoted("changes"),
			e.quoted("changes")).Scan(&st.Changes, &st.Bytes, &newest)
		if err != nil {
			return fmt.Errorf("reading the change log: %w", err)
		}
		st.NewestCommit = newest
		rows, err := pool.Query(e.ctx, `SELECT r.name, r.tbl, r.floor, (SELECT count(*) FROM `+e.quoted("changes")+` c WHERE c.resource = r.name)
FROM `+e.quoted("resources")+` r ORDER BY r.name`)
		if err != nil {
			return fmt.Errorf("reading resources: %w", err)
		}
		for rows.Next() {
			var r resourceStatus
			if err := rows.Scan(&r.Name, &r.Table, &r.Floor, &r.Changes); err != nil {
				return err
			}
			st.Resources = append(st.Resources, r)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("reading resources: %w", err)
		}
		if st.Replicator, err = e.lockHolder(pool, replicator.LockClass, int32(crc32.ChecksumIEEE([]byte(e.schema)))); err != nil {
			return err
		}
		if e.json {
			return e.printJSON(st)
		}
		w := tabwriter.NewWriter(e.out, 0, 0, 2, ' ', 0)
		fmt.Fprintf(w, "schema\t%s (version %d of %d)\n", st.Schema, st.Version, st.LatestVersion)
		fmt.Fprintf(w, "epoch\t%s\n", st.Epoch)
		fmt.Fprintf(w, "head\t%d\n", st.Head)
		fmt.Fprintf(w, "floor\t%d\n", st.Floor)
		fmt.Fprintf(w, "change log\t%d changes, %d bytes\n", st.Changes, st.Bytes)
		if st.NewestCommit != nil {
			fmt.Fprintf(w, "newest commit\t%s (%s ago)\n", st.NewestCommit.Format(time.RFC3339), time.Since(*st.NewestCommit).Round(time.Second))
		}
		if h := st.Replicator; h != nil {
			fmt.Fprintf(w, "replicator\tleader is backend %d (%s %s)\n", h.PID, h.Application, h.Client)
		} else {
			fmt.Fprintf(w, "replicator\tno leader (none running, or the Postgres bus)\n")
		}
		for _, r := range st.Resources {
			fmt.Fprintf(w, "resource %s\ttable %s, floor %d, %d changes\n", r.Name, r.Table, r.Floor, r.Changes)
		}
		return w.Flush()
	}
}

// lockHolder returns the session holding the two-key advisory lock
// (class, key), or nil.
func (e *env) lockHolder(pool *pgxpool.Pool, class, key int32) (*lockHolder, error) {
	rows, err := pool.Query(e.ctx, `SELECT l.pid, coalesce(a.application_name, ''), coalesce(host(a.client_addr), ''), a.backend_start
FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
  AND l.classid::bigint = $1 AND l.objid::bigint = $2 AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
		int64(uint32(class)), int64(uint32(key)))
	if err != nil {
		return nil, fmt.Errorf("reading locks: %w", err)
	}
	defer rows.Close()
	if !rows.Next() {
		return nil, rows.Err()
	}
	var h lockHolder
	if err := rows.Scan(&h.PID, &h.Application, &h.Client, &h.Since); err != nil {
		return nil, err
	}
	return &h, nil
}
