package main

import (
	"errors"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/core/feed/pgfeed/logrepl"
	"github.com/tidesync/tide/core/feed/replicator"
)

// status is what tide status reports.
type status struct {
	Database      string           `json:"database"`
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
	Roles         []roleHolder     `json:"roles"` // sequencer, replicator
	// Slot is the logical capture's replication slot, when there is one.
	Slot *feed.SlotStatus `json:"slot,omitempty"`
}

type resourceStatus struct {
	Name    string `json:"name"`
	Table   string `json:"table"`
	Floor   int64  `json:"floor"`
	Changes int64  `json:"changes"`
}

// roleHolder is the node holding a database-wide role.
type roleHolder struct {
	Role   string         `json:"role"`
	Node   string         `json:"node"`   // "" when no node holds it
	Holder *pgfeed.Holder `json:"holder"` // the Postgres session holding the role's lock, nil if none
}

func statusFlags(fs *flag.FlagSet) func(*env) error {
	return func(e *env) error {
		pool, f, err := e.connect(pgfeed.Options{})
		if err != nil {
			return err
		}
		defer pool.Close()
		defer f.Close()
		st := status{Database: e.db, Schema: e.schema, LatestVersion: pgfeed.SchemaVersion(), Resources: []resourceStatus{}}
		if err := e.installed(pool); err != nil {
			return err
		}
		if st.Version, err = e.schemaVersion(pool); err != nil {
			return err
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
		seqClass, key := pgfeed.SequencerLock(e.schema)
		for _, r := range []struct {
			name       string
			class, key int32
		}{{pgfeed.RoleSequencer, seqClass, key}, {pgfeed.RoleReplicator, replicator.LockClass, key}} {
			h, err := pgfeed.LockHolder(e.ctx, pool, r.class, r.key)
			if err != nil {
				return fmt.Errorf("reading the %s's holder: %w", r.name, err)
			}
			rh := roleHolder{Role: r.name, Holder: h}
			if h != nil {
				rh.Node = h.Application
				if node, ok := pgfeed.ParseRoleAppName(r.name, h.Application); ok {
					rh.Node = node
				}
			}
			st.Roles = append(st.Roles, rh)
		}
		if s, err := logrepl.ReadSlot(e.ctx, pool, f.SlotName()); err == nil {
			st.Slot = &feed.SlotStatus{Name: f.SlotName(), Active: s.Active, LagBytes: s.LagBytes, RetainedBytes: s.RetainedBytes}
		} else if !errors.Is(err, logrepl.ErrNoSlot) {
			return fmt.Errorf("reading the replication slot: %w", err)
		}
		if e.json {
			return e.printJSON(st)
		}
		w := tabwriter.NewWriter(e.out, 0, 0, 2, ' ', 0)
		fmt.Fprintf(w, "database\t%s\n", st.Database)
		fmt.Fprintf(w, "schema\t%s (version %d of %d)\n", st.Schema, st.Version, st.LatestVersion)
		fmt.Fprintf(w, "epoch\t%s\n", st.Epoch)
		fmt.Fprintf(w, "head\t%d\n", st.Head)
		fmt.Fprintf(w, "floor\t%d\n", st.Floor)
		fmt.Fprintf(w, "change log\t%d changes, %d bytes\n", st.Changes, st.Bytes)
		if st.NewestCommit != nil {
			fmt.Fprintf(w, "newest commit\t%s (%s ago)\n", st.NewestCommit.Format(time.RFC3339), time.Since(*st.NewestCommit).Round(time.Second))
		}
		for _, r := range st.Roles {
			switch {
			case r.Holder != nil:
				fmt.Fprintf(w, "%s\tnode %s (backend %d%s)\n", r.Role, r.Node, r.Holder.PID, clientAddr(r.Holder.Client))
			case r.Role == pgfeed.RoleReplicator:
				fmt.Fprintf(w, "%s\tnone (no replicator runs: the Postgres bus needs none)\n", r.Role)
			default:
				fmt.Fprintf(w, "%s\tnone (no node is running: committed changes wait for one)\n", r.Role)
			}
		}
		if s := st.Slot; s != nil {
			state := "no consumer streams from it: WAL accumulates"
			if s.Active {
				state = "streaming"
			}
			fmt.Fprintf(w, "logical slot\t%s (%s), lag %d bytes, retained WAL %d bytes\n", s.Name, state, s.LagBytes, s.RetainedBytes)
		}
		for _, r := range st.Resources {
			fmt.Fprintf(w, "resource %s\ttable %s, floor %d, %d changes\n", r.Name, r.Table, r.Floor, r.Changes)
		}
		return w.Flush()
	}
}

func clientAddr(a string) string {
	if a == "" {
		return ""
	}
	return " from " + a
}
