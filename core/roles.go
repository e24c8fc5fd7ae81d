package core

import (
	"context"
	"errors"

	"github.com/tidesync/tide/core/feed"
)

// Node returns the name this node goes by: its feed's, if the feed
// reports roles (the Postgres feed's Options.Node), else
// feed.DefaultNode(), the host name and process id. tide status names a
// role's holder by it, and so do the status page and metrics.
func (e *Engine) Node() string {
	if rr, ok := e.feed.(feed.RoleReporter); ok {
		return rr.Node()
	}
	return defaultNode
}

// defaultNode is the name of a node whose feed names none.
var defaultNode = feed.DefaultNode()

// Roles returns this node's part in each database-wide role election and
// the node holding each role: the feed's (the Postgres feed's sequencer),
// then those of Config.Roles (the replicator). It reads the database, and
// returns what it could read with the errors of what it could not. An
// in-memory engine has none.
func (e *Engine) Roles(ctx context.Context) ([]feed.Role, error) {
	var roles []feed.Role
	var errs []error
	reporters := e.cfg.Roles
	if rr, ok := e.feed.(feed.RoleReporter); ok {
		reporters = append([]feed.RoleReporter{rr}, reporters...)
	}
	for _, rr := range reporters {
		rs, err := rr.Roles(ctx)
		if err != nil {
			errs = append(errs, err)
		}
		roles = append(roles, rs...)
	}
	return roles, errors.Join(errs...)
}
