package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// sqlWriter writes the items table with plain SQL, as an app's own
// handlers would, until ctx ends or it has made max writes: upserts that
// may move a row to another tenant or hide it from all but one user,
// visibility flips, deletes, and transactions of several of those. A write
// that fails (Postgres restarting) is dropped: the database, not the
// writer, is what the clients are compared with. It returns the writes
// attempted and those that failed.
func sqlWriter(ctx context.Context, pool *pgxpool.Pool, schema string, rng *rand.Rand, tenants, users, keys, max int, every time.Duration) (writes, failed int) {
	table := schema + ".items"
	vis := func() string {
		if rng.IntN(5) < 3 {
			return visAll
		}
		return fmt.Sprintf("u%d", rng.IntN(users))
	}
	one := func(tx pgx.Tx) error {
		id := fmt.Sprintf("s-%d", rng.IntN(keys))
		var err error
		switch r := rng.IntN(10); {
		case r < 5:
			_, err = tx.Exec(ctx, `INSERT INTO `+table+` (id, tenant, vis, n, writer) VALUES ($1, $2, $3, 1, 'sql')
ON CONFLICT (id) DO UPDATE SET tenant = EXCLUDED.tenant, vis = EXCLUDED.vis, n = `+table+`.n + 1`,
				id, tenantName(rng.IntN(tenants)), vis())
		case r < 8:
			_, err = tx.Exec(ctx, `UPDATE `+table+` SET vis = $2, n = n + 1 WHERE id = $1`, id, vis())
		default:
			_, err = tx.Exec(ctx, `DELETE FROM `+table+` WHERE id = $1`, id)
		}
		return err
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for writes < max {
		select {
		case <-ctx.Done():
			return writes, failed
		case <-t.C:
		}
		n := 1
		if rng.IntN(6) == 0 {
			n = 2 + rng.IntN(3) // several changes in one transaction
		}
		writes++
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := pgx.BeginFunc(wctx, pool, func(tx pgx.Tx) error {
			for range n {
				if err := one(tx); err != nil {
					return err
				}
			}
			return nil
		})
		cancel()
		if err != nil && ctx.Err() == nil {
			failed++
		}
	}
	return writes, failed
}

// mutationWriter issues put mutations from fc until ctx ends or it has
// issued max.
func mutationWriter(ctx context.Context, fc *fclient, rng *rand.Rand, max int, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for range max {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fc.mutate(rng)
	}
}
