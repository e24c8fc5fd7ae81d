package pgfeed

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidesync/tide/internal/pgconnect"
)

// connect opens one of the feed's own sessions (what names it in the log),
// each attempt bounded by timeout when it is positive. While the server
// has no free connection (SQLSTATE 53300) it waits with backoff and logs
// that once; other errors are returned for the caller's own retry.
func (f *Feed) connect(ctx context.Context, what string, cfg *pgx.ConnConfig, timeout time.Duration) (*pgx.Conn, error) {
	return pgconnect.Retry(ctx, f.log, "pgfeed "+what, func(ctx context.Context) (*pgx.Conn, error) {
		if timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		return pgx.ConnectConfig(ctx, cfg)
	})
}
