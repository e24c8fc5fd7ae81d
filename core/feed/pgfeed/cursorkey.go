package pgfeed

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tidesync/tide/core/feed"
)

// CursorKey implements feed.CursorKeyer: the 32 random bytes Migrate stored
// in tide's meta table (schema version 7), the same for every node of the
// database. It is read from the database once and kept; until Migrate has
// run its error wraps feed.ErrNotInstalled.
func (f *Feed) CursorKey(ctx context.Context) ([]byte, error) {
	if k := f.cursorKey.Load(); k != nil {
		return append([]byte(nil), *k...), nil
	}
	var k []byte
	if err := f.pool.QueryRow(ctx, "SELECT cursor_key FROM "+f.n.meta).Scan(&k); err != nil {
		if isUndefinedColumn(err) {
			return nil, fmt.Errorf("pgfeed: read the cursor key: %w: schema %q predates this build; call Migrate (tide.Open does): %w", feed.ErrNotInstalled, f.opts.Schema, err)
		}
		return nil, f.notInstalled("read the cursor key", err)
	}
	if len(k) != feed.CursorKeySize {
		return nil, fmt.Errorf("pgfeed: %s.meta holds a cursor key of %d bytes, want %d", f.opts.Schema, len(k), feed.CursorKeySize)
	}
	f.cursorKey.Store(&k)
	return append([]byte(nil), k...), nil
}

// isUndefinedColumn reports whether err says a column is missing.
func isUndefinedColumn(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42703"
}
