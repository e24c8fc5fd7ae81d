package feed

import (
	"context"
	"fmt"
	"os"
)

// DefaultNode returns the name a node goes by when its configuration names
// none: the host name and the process id, as in "web-1:4242".
func DefaultNode() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	return fmt.Sprintf("%s:%d", host, os.Getpid())
}

// Role is a database-wide role that one node holds at a time (the
// sequencer of the Postgres change log, the replicator, ...), as seen from
// one node: its own part in the election and which node holds the role.
type Role struct {
	// Name is the role: "sequencer", "replicator" (room is left for
	// others, such as a logical-feed consumer).
	Name string `json:"name"`
	// State is this node's part: "leader" (it holds the role), "standby"
	// (it would take over), or "off" (it is not a candidate); a role may
	// report finer states (the replicator's "starting", "stopped").
	State string `json:"state"`
	// Holder names the node that holds the role now ("" if none does),
	// as that node names itself; HolderPID is the Postgres backend of the
	// session holding the role's lock (0 if none): pg_terminate_backend
	// on it forces a failover.
	Holder    string `json:"holder"`
	HolderPID uint32 `json:"holder_pid,omitempty"`
	// Slot is the replication slot whose consumer the role runs, as the
	// database reports it (the Postgres feed's logical capture); nil for
	// a role without one.
	Slot *SlotStatus `json:"slot,omitempty"`
}

// SlotStatus is a replication slot's progress: how far its consumer is
// behind and the WAL the slot keeps on the database server's disk.
type SlotStatus struct {
	// Name is the slot's name.
	Name string `json:"name"`
	// Active is true while a consumer streams from the slot.
	Active bool `json:"active"`
	// LagBytes is the WAL written since the position the consumer last
	// confirmed.
	LagBytes int64 `json:"lag_bytes"`
	// RetainedBytes is the WAL the slot keeps: it grows without bound
	// while no consumer confirms.
	RetainedBytes int64 `json:"retained_bytes"`
}

// RoleReporter is implemented by the parts of a node that take part in a
// role election (the Postgres feed, the replicator): Node returns the name
// this node goes by, Roles this node's part in each election and who holds
// the role, reading the database where it must.
type RoleReporter interface {
	Node() string
	Roles(ctx context.Context) ([]Role, error)
}
