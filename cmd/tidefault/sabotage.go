package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidesync/tide/core/feed/pgfeed/logrepl"
)

// writeUncaptured is -sabotage uncaptured, which proves the checker fires:
// after the faults, it inserts in each tenant a row everyone allowed the
// tenant may see, and deletes one such row the SQL writers left, where the
// capture cannot see it: under the trigger capture in a transaction with
// session_replication_role = replica (row triggers do not fire), under the
// logical capture while the table is out of the publication (its changes
// are not decoded). No client can hear of them, so the checker must count
// them (lost, and ghost for the delete when a client had the row) and
// fail the run. It returns what it wrote.
func writeUncaptured(ctx context.Context, pool *pgxpool.Pool, schema string, tenants int, logical bool) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	table := pgx.Identifier{schema, "items"}.Sanitize()
	pub := pgx.Identifier{logrepl.PublicationName(schema + "_tide")}.Sanitize()
	if logical {
		if _, err := pool.Exec(ctx, `ALTER PUBLICATION `+pub+` DROP TABLE `+table); err != nil {
			return "", err
		}
	}
	var deleted string
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if !logical {
			if _, err := tx.Exec(ctx, `SET LOCAL session_replication_role = replica`); err != nil {
				return err
			}
		}
		for t := range tenants {
			if _, err := tx.Exec(ctx, `INSERT INTO `+table+` (id, tenant, vis, n, writer) VALUES ($1, $2, $3, 1, 'sql')`,
				fmt.Sprintf("x-uncaptured-%d", t), tenantName(t), visAll); err != nil {
				return err
			}
		}
		err := tx.QueryRow(ctx, `DELETE FROM `+table+` WHERE id = (SELECT id FROM `+table+`
WHERE writer = 'sql' AND vis = $1 ORDER BY id LIMIT 1) RETURNING id`, visAll).Scan(&deleted)
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil
		}
		return err
	})
	if logical {
		_, aerr := pool.Exec(ctx, `ALTER PUBLICATION `+pub+` ADD TABLE `+table)
		err = errors.Join(err, aerr)
	}
	if err != nil {
		return "", err
	}
	how := "with session_replication_role = replica"
	if logical {
		how = "while " + table + " was out of the publication"
	}
	return fmt.Sprintf("inserted x-uncaptured-0..%d and deleted %q %s", tenants-1, deleted, how), nil
}
