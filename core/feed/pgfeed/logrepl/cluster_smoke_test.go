package logrepl

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestClusterSmoke(t *testing.T) {
	url := logicalURL(t)
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if err := CheckWALLevel(context.Background(), conn); err != nil {
		t.Fatal(err)
	}
}
