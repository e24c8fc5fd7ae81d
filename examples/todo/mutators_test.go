package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidesync/tide/core/protocol"
)

// TestDemoMutators: the demo's writes as a client makes them, through its
// mutators: put creates and changes a todo, a project the user is not in
// is refused, remove deletes it, and a resent key is not applied twice.
func TestDemoMutators(t *testing.T) {
	base, hc, _ := startDemo(t)
	if resp, err := hc.Get(base); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	at := time.Now().UnixMilli()
	mutate := func(key, name, args string) (int, protocol.ServerFrame) {
		t.Helper()
		body := fmt.Sprintf(`{"v":1,"key":%q,"resource":"todos","name":%q,"args":%s,"at":%d}`, key, name, args, at)
		req, _ := http.NewRequest(http.MethodPost, base+"tide/mutate", strings.NewReader(body))
		req.Header.Set("Tide-Origin", "test-tab")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		f, err := protocol.DecodeServerFrame(b)
		if err != nil {
			t.Fatalf("%s: %q: %v", name, b, err)
		}
		return resp.StatusCode, f
	}
	if st, f := mutate("k1", "put", `{"id":"m1","project_id":"demo","title":"by mutator"}`); st != 200 || len(f.Entries) != 1 || f.Entries[0].Key != "m1" {
		t.Fatalf("put: %d %+v", st, f)
	}
	if st, f := mutate("k1", "put", `{"id":"m1","project_id":"demo","title":"by mutator"}`); st != 200 || !f.Replayed {
		t.Fatalf("resent put: %d %+v", st, f)
	}
	if st, f := mutate("k2", "put", `{"id":"m2","project_id":"work","title":"not mine"}`); st != http.StatusForbidden || f.Code != protocol.CodeForbidden {
		t.Fatalf("put into another project: %d %+v", st, f)
	}
	if st, f := mutate("k3", "put", `{"id":"m1","project_id":"demo","title":"  "}`); st != http.StatusBadRequest || f.Code != protocol.CodeInvalidArgs {
		t.Fatalf("blank title: %d %+v", st, f)
	}
	if st, f := mutate("k4", "remove", `{"id":"m1","project_id":"demo"}`); st != 200 || len(f.Entries) != 1 || f.Entries[0].Op != "delete" {
		t.Fatalf("remove: %d %+v", st, f)
	}
}
