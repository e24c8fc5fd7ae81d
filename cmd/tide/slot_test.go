package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/tidesync/tide/internal/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopLogical()
	os.Exit(code)
}

// TestSlotCommands: tide migrate --logical sets up the logical capture
// (its slot shows in tide status), tide slot drop removes it, and on a
// server without wal_level logical, migrate --logical fails with the
// setting named.
func TestSlotCommands(t *testing.T) {
	pool, name := testenv.LogicalSchema(t, nil)
	pool.Close()
	schema := name + "_tide"
	vars := map[string]string{"DATABASE_URL": testenv.LogicalURL(t)}
	code, out, errs := tideEnv(t, vars, "migrate", "--logical", "--schema", schema)
	if code != exitOK || !strings.Contains(out, "replication slot "+schema+"_logrepl is ready") {
		t.Fatalf("migrate --logical: %d %q %q", code, out, errs)
	}
	code, out, errs = tideEnv(t, vars, "status", "--json", "--schema", schema)
	var st status
	if code != exitOK || json.Unmarshal([]byte(out), &st) != nil || st.Slot == nil || st.Slot.Name != schema+"_logrepl" {
		t.Fatalf("status: %d %q %q", code, out, errs)
	}
	code, out, errs = tideEnv(t, vars, "status", "--schema", schema)
	if code != exitOK || !strings.Contains(out, "logical slot") {
		t.Fatalf("status: %d %q %q", code, out, errs)
	}
	code, out, errs = tideEnv(t, vars, "slot", "drop", "--schema", schema)
	if code != exitOK || !strings.Contains(out, "are gone") {
		t.Fatalf("slot drop: %d %q %q", code, out, errs)
	}
	code, out, errs = tideEnv(t, vars, "status", "--json", "--schema", schema)
	st = status{}
	if code != exitOK || json.Unmarshal([]byte(out), &st) != nil || st.Slot != nil {
		t.Fatalf("status after slot drop: %d %q %q", code, out, errs)
	}

	_, other := setup(t)
	var level string
	if err := testenv.Postgres(t).QueryRow(t.Context(), "SHOW wal_level").Scan(&level); err != nil {
		t.Fatal(err)
	}
	if level != "logical" {
		code, _, errs = tide(t, "migrate", "--logical", "--schema", other)
		if code != exitFail || !strings.Contains(errs, "wal_level = logical") {
			t.Fatalf("migrate --logical without wal_level logical: %d %q", code, errs)
		}
	}
}
