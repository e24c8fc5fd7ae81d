package middleware_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/core/tidetest"
	"github.com/tidesync/tide/internal/testenv"
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

// TestInspectInChromium: the status page's inspector, opened by a link
// carrying its parameters, asks <status>/inspect and shows the verdict per
// subscription; a screenshot is left in TIDE_INSPECT_SCREENSHOT (or the
// test's temporary directory).
func TestInspectInChromium(t *testing.T) {
	bin, err := exec.LookPath("chromium")
	if err != nil {
		testenv.Missing(t, "chromium is not installed", "apt-get install chromium")
	}
	ops := func(*http.Request) (authz.Principal, error) {
		return authz.Principal{ID: "ops", Claims: map[string]any{"ops": true, "projects": []string{"p7"}}}, nil
	}
	srv, tbl := statusServer(t, opsOnly, ops)
	if err := tbl.Upsert(context.Background(), todo{"a", "p7", "x"}); err != nil {
		t.Fatal(err)
	}
	c := tidetest.Dial(t, "ws"+strings.TrimPrefix(srv.URL, "http")+"/tide/ws")
	c.Hello(protocol.ClientFrame{Origin: "laptop"})
	c.Subscribe("s", "todos", map[string]any{"project_id": "p7"})
	c.Collect("s")

	chromium := func(args ...string) []byte {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang bound, not an assertion
		defer cancel()
		base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
			"--disable-component-update", "--disable-sync", "--no-first-run", "--user-data-dir=" + t.TempDir(),
			"--virtual-time-budget=5000", "--window-size=1200,900"}
		out, err := exec.CommandContext(ctx, bin, append(base, args...)...).Output()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("chromium: %v: %s", err, ee.Stderr)
		} else if err != nil {
			t.Fatalf("chromium: %v", err)
		}
		return out
	}
	page := srv.URL + "/tide/status?principal=ops&resource=todos&key=a"
	dom := string(chromium("--dump-dom", page))
	for _, want := range []string{"<td>delivered</td>", "<td>laptop</td>", "<td>todos where project_id = p7</td>", "verdict delivered"} {
		if !strings.Contains(dom, want) {
			t.Errorf("rendered inspector lacks %q", want)
		}
	}
	shot := os.Getenv("TIDE_INSPECT_SCREENSHOT")
	switch {
	case shot == "":
		shot = filepath.Join(t.TempDir(), "inspect.png")
	case !filepath.IsAbs(shot):
		// Relative to the repository's root, where the docs' command runs
		// (go test runs this in middleware/, and so does chromium).
		abs, err := filepath.Abs(filepath.Join("..", shot))
		if err != nil {
			t.Fatal(err)
		}
		shot = abs
	}
	chromium("--screenshot="+shot, "--window-size=1200,1100", page)
	if fi, err := os.Stat(shot); err != nil || fi.Size() == 0 {
		t.Fatalf("no screenshot: %v", err)
	}
}
