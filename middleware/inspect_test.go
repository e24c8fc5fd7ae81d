package middleware_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/core/tidetest"
)

// TestInspectEndpoint: <status>/inspect answers the engine's report under
// the status page's policy: 401/403 without ops access, 400 with a stable
// code for a missing or bad parameter or an unknown resource, and the
// verdicts as JSON for ops.
func TestInspectEndpoint(t *testing.T) {
	srv, tbl := statusServer(t, opsOnly, headerPrincipal)
	if err := tbl.Upsert(context.Background(), todo{"t1", "p7", "x"}); err != nil {
		t.Fatal(err)
	}
	c := tidetest.Dial(t, "ws"+strings.TrimPrefix(srv.URL, "http")+"/tide/ws", tidetest.WithHeader("X-User", "alice"))
	c.Hello(protocol.ClientFrame{Origin: "laptop"})
	c.Subscribe("s", "todos", map[string]any{"project_id": "p7"})
	c.Collect("s")

	const ok = "/tide/status/inspect?principal=alice&resource=todos&key=t1"
	if code, body := get(t, srv.URL+ok, "alice"); code != http.StatusForbidden || strings.Contains(body, "verdict") {
		t.Errorf("alice: %d %q", code, body)
	}
	if code, body := get(t, srv.URL+ok, ""); code != http.StatusUnauthorized || strings.Contains(body, "verdict") {
		t.Errorf("anonymous: %d %q", code, body)
	}
	denyAll, _ := statusServer(t, nil, headerPrincipal)
	if code, _ := get(t, denyAll.URL+ok, "ops"); code != http.StatusForbidden {
		t.Errorf("nil policy: %d", code)
	}

	for _, tc := range []struct {
		query, code, param string
	}{
		{"resource=todos&key=t1", "bad_frame", "principal"},
		{"principal=alice&key=t1", "bad_frame", "resource"},
		{"principal=alice&resource=todos", "bad_frame", "key"},
		{"principal=alice&resource=todos&key=", "bad_frame", "key"},
		{"principal=alice&resource=todos&key=t1&key=t2", "bad_frame", "key"},
		{"principal=alice&resource=todos&key=t1&colour=red", "bad_frame", "colour"},
		{"principal=alice&resource=todos&key=%01", "bad_frame", "key"},
		{"principal=alice&resource=todos&key=t1&origin=" + strings.Repeat("o", 200), "bad_frame", "origin"},
		{"principal=alice&resource=nope&key=t1", "unknown_resource", "resource"},
	} {
		code, body := get(t, srv.URL+"/tide/status/inspect?"+tc.query, "ops")
		var e struct{ Code, Detail string }
		if err := json.Unmarshal([]byte(body), &e); err != nil || code != http.StatusBadRequest || e.Code != tc.code || e.Detail != "parameter: "+tc.param {
			t.Errorf("%s: %d %q", tc.query, code, body)
		}
	}

	for _, tc := range []struct{ query, verdict string }{
		{"principal=alice&resource=todos&key=t1", core.VerdictDelivered},
		{"principal=alice&resource=todos&key=t1&origin=laptop", core.VerdictDelivered},
		{"principal=alice&resource=todos&key=t2", core.VerdictOutOfScope},
		{"principal=alice&resource=notes&key=t1", core.VerdictNotSubscribed},
		{"principal=bob&resource=todos&key=t1", core.VerdictNotConnected},
	} {
		code, body := get(t, srv.URL+"/tide/status/inspect?"+tc.query, "ops")
		var rep core.InspectReport
		if err := json.Unmarshal([]byte(body), &rep); err != nil || code != http.StatusOK || rep.Verdict != tc.verdict || rep.Node == "" {
			t.Errorf("%s: %d %q", tc.query, code, body)
		}
	}
}
