package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"slices"
	"testing"

	"github.com/tidesync/tide/core/protocol"
)

// The reconcile vectors in testdata/reconcile are shared with the browser
// client: both must produce the same rows and log from the same inputs.
type reconcileVector struct {
	Name  string `json:"name"`
	Scope struct {
		Resource   string         `json:"resource"`
		Conditions map[string]any `json:"conditions"`
	} `json:"scope"`
	Cursor     string                     `json:"cursor"`
	ServerRows map[string]json.RawMessage `json:"server_rows"`
	Pending    []struct {
		Key string           `json:"key"`
		Seq int64            `json:"seq"`
		Ops []protocol.Entry `json:"ops"`
	} `json:"pending"`
	Strategy struct {
		Kind       string          `json:"kind"`
		Field      string          `json:"field"`
		Returns    json.RawMessage `json:"returns"`
		Conflict   bool            `json:"conflict"`
		ExpectArgs *struct {
			Local, Base, Server json.RawMessage
		} `json:"expect_args"`
	} `json:"strategy"`
	Answers []struct {
		Type    string           `json:"type"`
		Key     string           `json:"key"`
		Cursor  string           `json:"cursor"`
		Entries []protocol.Entry `json:"entries"`
		Code    protocol.Code    `json:"code"`
	} `json:"answers"`
	Then *struct {
		Cursor     string                     `json:"cursor"`
		ServerRows map[string]json.RawMessage `json:"server_rows"`
	} `json:"then"`
	Expect struct {
		Rows     map[string]json.RawMessage `json:"rows"`
		Pending  []string                   `json:"pending"`
		Conflict bool                       `json:"conflict"`
	} `json:"expect"`
}

func loadVectors(t *testing.T) []reconcileVector {
	t.Helper()
	data, err := os.ReadFile("testdata/reconcile/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		About   string            `json:"about"`
		Vectors []reconcileVector `json:"vectors"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields() // a misspelt field must not pass silently
	if err := dec.Decode(&f); err != nil {
		t.Fatal(err)
	}
	if len(f.Vectors) == 0 {
		t.Fatal("no vectors")
	}
	return f.Vectors
}

// jsonEq compares JSON values semantically; "null" and absent are equal.
func jsonEq(a, b json.RawMessage) bool {
	var x, y any
	if len(a) > 0 && json.Unmarshal(a, &x) != nil || len(b) > 0 && json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

func nullable(raw json.RawMessage) json.RawMessage {
	if string(raw) == "null" {
		return nil
	}
	return raw
}

func TestReconcileVectors(t *testing.T) {
	for _, v := range loadVectors(t) {
		t.Run(v.Name, func(t *testing.T) {
			n, err := Scope{Resource: v.Scope.Resource, Conditions: v.Scope.Conditions}.normalize()
			if err != nil {
				t.Fatal(err)
			}
			r := newReplica()
			sc := newScopeCopy(n)
			sc.base, sc.cursor = compactRows(t, v.ServerRows), v.Cursor
			r.scopes[n.digest] = sc

			var mergeArgs [][3]json.RawMessage
			var strategy Strategy
			switch v.Strategy.Kind {
			case "server-wins":
				strategy = ServerWins{}
			case "last-write-wins":
				strategy = LastWriteWins{Field: v.Strategy.Field}
			case "merge":
				strategy = Merge(func(local, base, server json.RawMessage) (json.RawMessage, error) {
					mergeArgs = append(mergeArgs, [3]json.RawMessage{local, base, server})
					if v.Strategy.Conflict {
						return nil, errors.New("they disagree")
					}
					return nullable(v.Strategy.Returns), nil
				})
			default:
				t.Fatalf("strategy %q", v.Strategy.Kind)
			}
			for _, p := range v.Pending {
				ops := slices.Clone(p.Ops)
				for i := range ops {
					if ops[i].Resource == "" {
						ops[i].Resource = n.resource
					}
					if ops[i].Op == "delete" {
						ops[i].Row = nil
					} else {
						ops[i].Row, _ = normRow(ops[i].Row)
					}
				}
				r.log = append(r.log, &logItem{key: p.Key, seq: p.Seq, resource: n.resource, name: "m", strategy: strategy, ops: ops, handle: &PendingMutation{key: p.Key}})
				r.seq = p.Seq
			}
			r.refresh(nil)

			conflicted := false
			for _, a := range v.Answers {
				switch a.Type {
				case "ack":
					entries := slices.Clone(a.Entries)
					for i := range entries {
						if entries[i].Op == "upsert" {
							entries[i].Row, _ = normRow(entries[i].Row)
						}
					}
					_, _, conflicts := r.ack(a.Key, a.Cursor, entries)
					conflicted = conflicted || len(conflicts) > 0
				case "reject":
					r.reject(a.Key)
				default:
					t.Fatalf("answer %q", a.Type)
				}
				r.settle()
				r.refresh(nil)
			}
			if v.Then != nil {
				sc.base, sc.cursor = compactRows(t, v.Then.ServerRows), v.Then.Cursor
				r.settle()
				r.refresh(nil)
			}

			if len(sc.view) != len(v.Expect.Rows) {
				t.Errorf("rows %s, want %s", mustJSON(sc.view), mustJSON(v.Expect.Rows))
			} else {
				for k, want := range v.Expect.Rows {
					if !jsonEq(sc.view[k], want) {
						t.Errorf("row %s = %s, want %s", k, sc.view[k], want)
					}
				}
			}
			if got := r.pendingKeys(); !slices.Equal(got, v.Expect.Pending) && !(len(got) == 0 && len(v.Expect.Pending) == 0) {
				t.Errorf("log keys %v, want %v", got, v.Expect.Pending)
			}
			if conflicted != v.Expect.Conflict {
				t.Errorf("conflict reported: %v, want %v", conflicted, v.Expect.Conflict)
			}
			if ea := v.Strategy.ExpectArgs; ea != nil {
				if len(mergeArgs) != 1 {
					t.Fatalf("merge called %d times, want once", len(mergeArgs))
				}
				got := mergeArgs[0]
				for i, want := range []json.RawMessage{nullable(ea.Local), nullable(ea.Base), nullable(ea.Server)} {
					if (got[i] == nil) != (want == nil) || !jsonEq(got[i], want) {
						t.Errorf("merge argument %d = %s, want %s", i, got[i], want)
					}
				}
			}
		})
	}
}

func compactRows(t *testing.T, rows map[string]json.RawMessage) map[string]json.RawMessage {
	t.Helper()
	out := map[string]json.RawMessage{}
	for k, r := range rows {
		c, err := normRow(r)
		if err != nil {
			t.Fatalf("row %s: %v", k, err)
		}
		out[k] = c
	}
	return out
}

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }
