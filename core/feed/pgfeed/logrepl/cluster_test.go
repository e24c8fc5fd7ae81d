package logrepl

import (
	"os"
	"testing"

	"github.com/tidesync/tide/internal/testenv"
)

// The tests need a Postgres with wal_level = logical: testenv.LogicalURL
// gives one (TIDE_TEST_LOGICAL_DATABASE_URL, or a private cluster).

const logicalURLEnv = testenv.LogicalURLEnv

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopLogical()
	os.Exit(code)
}

func logicalURL(t testing.TB) string { return testenv.LogicalURL(t) }
