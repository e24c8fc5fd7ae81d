// Command pgtool is the browser end-to-end tests' helper for Postgres: it
// makes a fresh schema for one run (the demo's tables in it, tide's feed in
// <schema>_tide), runs a query, and drops the schemas again.
//
//	pgtool create            prints the new schema's name
//	pgtool query SCHEMA SQL  prints each row as a JSON array, one a line
//	pgtool exec SCHEMA SQL   runs SQL, which may be several statements (the
//	                         simple protocol: one session, one implicit
//	                         transaction), and prints nothing
//	pgtool drop SCHEMA       drops SCHEMA and SCHEMA_tide
//
// The database is TIDE_TEST_DATABASE_URL (default: the local test database).
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidesync/tide/internal/testenv"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "pgtool:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	url := testenv.DatabaseURL()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	switch {
	case len(args) == 1 && args[0] == "create":
		b := make([]byte, 6)
		_, _ = rand.Read(b)
		name := "tidetest_js_" + hex.EncodeToString(b) // testenv's prefix: a leftover can be found and dropped
		if _, err := conn.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
			return err
		}
		fmt.Println(name)
		return nil
	case len(args) == 3 && args[0] == "query":
		if _, err := conn.Exec(ctx, "SET search_path TO "+pgx.Identifier{args[1]}.Sanitize()); err != nil {
			return err
		}
		rows, err := conn.Query(ctx, args[2])
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				return err
			}
			line, _ := json.Marshal(vals)
			fmt.Println(string(line))
		}
		return rows.Err()
	case len(args) == 3 && args[0] == "exec":
		_, err := conn.Exec(ctx, "SET search_path TO "+pgx.Identifier{args[1]}.Sanitize()+"; "+args[2], pgx.QueryExecModeSimpleProtocol)
		return err
	case len(args) == 2 && args[0] == "drop":
		for _, s := range []string{args[1], args[1] + "_tide"} {
			if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{s}.Sanitize()+" CASCADE"); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("usage: pgtool create | query SCHEMA SQL | exec SCHEMA SQL | drop SCHEMA")
}
