package pgfeed

import (
	"context"
	"strings"

	"github.com/tidesync/tide/core/feed"
)

// Names of the database-wide roles, as tide status, the status page and
// metrics show them.
const (
	RoleSequencer  = "sequencer"
	RoleReplicator = "replicator"
)

// appNamePrefix starts the application_name of every connection that
// holds a role; maxAppName is Postgres's limit (NAMEDATALEN - 1).
const (
	appNamePrefix = "tide "
	maxAppName    = 63
)

// RoleAppName returns the application_name of the connection with which
// node holds role: "tide <role> <node>", cut to Postgres's 63 bytes.
// ParseRoleAppName reads it back.
func RoleAppName(role, node string) string {
	s := appNamePrefix + role
	if node != "" {
		s += " " + node
	}
	if len(s) > maxAppName {
		s = s[:maxAppName]
	}
	return s
}

// ParseRoleAppName returns the node named in an application_name made by
// RoleAppName for role, and whether it is one.
func ParseRoleAppName(role, appName string) (node string, ok bool) {
	rest, ok := strings.CutPrefix(appName, appNamePrefix+role)
	if !ok || rest != "" && rest[0] != ' ' {
		return "", false
	}
	return strings.TrimPrefix(rest, " "), true
}

// Node returns the name this feed's node goes by (Options.Node).
func (f *Feed) Node() string { return f.opts.Node }

// Roles implements feed.RoleReporter: this node's part in the sequencer
// election, and the node holding the role, read from the database.
func (f *Feed) Roles(ctx context.Context) ([]feed.Role, error) {
	st := f.SequencerStatus()
	r := feed.Role{Name: RoleSequencer, State: st.Role.String()}
	h, err := LockHolder(ctx, f.pool, lockClassSequencer, f.n.key)
	if err != nil {
		return nil, f.wrap("reading the sequencer's holder", err)
	}
	if h != nil {
		r.HolderPID = h.PID
		if node, ok := ParseRoleAppName(RoleSequencer, h.Application); ok {
			r.Holder = node
		} else {
			r.Holder = h.Application // an older version's session
		}
	}
	if f.logical() {
		ls, err := f.LogicalStatus(ctx)
		if err != nil {
			return nil, err
		}
		r.Slot = &feed.SlotStatus{Name: ls.Slot, Active: ls.Active, LagBytes: ls.LagBytes, RetainedBytes: ls.RetainedBytes}
	}
	return []feed.Role{r}, nil
}

// Holder is the Postgres session holding an advisory lock.
type Holder struct {
	PID         uint32 `json:"pid"`
	Application string `json:"application"`
	Client      string `json:"client,omitempty"`
}

// LockHolder returns the session of the current database that holds the
// session-level advisory lock (class, key), or nil if none does.
func LockHolder(ctx context.Context, q querier, class, key int32) (*Holder, error) {
	rows, err := q.Query(ctx, `SELECT l.pid, coalesce(a.application_name, ''), coalesce(host(a.client_addr), '')
FROM pg_catalog.pg_locks l LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
  AND l.classid::bigint = $1 AND l.objid::bigint = $2
  AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = pg_catalog.current_database())`,
		int64(uint32(class)), int64(uint32(key)))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	if !rows.Next() {
		return nil, rows.Err()
	}
	var h Holder
	var pid int32
	if err := rows.Scan(&pid, &h.Application, &h.Client); err != nil {
		return nil, err
	}
	h.PID = uint32(pid)
	return &h, rows.Err()
}

// SequencerLock returns the two keys of the sequencer role's advisory lock
// for schema, for LockHolder.
func SequencerLock(schema string) (class, key int32) {
	return lockClassSequencer, newNames(schema).key
}
