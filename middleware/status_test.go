package middleware_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
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
	"github.com/tidesync/tide/middleware"
)

// opsOnly lets principals with the "ops" claim see the status page.
func opsOnly(_ *http.Request, p authz.Principal) error {
	if v, _ := p.Claims["ops"].(bool); v {
		return nil
	}
	return authz.ErrForbidden
}

// statusServer serves an engine whose status page uses policy; principal
// names the caller of every request.
func statusServer(t *testing.T, policy middleware.StatusPolicy, principal middleware.PrincipalFunc) (*httptest.Server, *core.Table[todo]) {
	t.Helper()
	rec := middleware.NewStatusRecorder()
	e, err := core.New(core.Config{Observer: rec})
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := core.Register(e, core.Resource[todo]{Table: "todos", Authorize: authz.RequireClaim("project_id", "projects")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := core.Register(e, core.Resource[note]{Table: "notes", Authorize: authz.RequireClaim("project_id", "projects")}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(middleware.Middleware(e, middleware.WithPrincipal(principal), middleware.WithStatusPage(policy, rec))(http.NotFoundHandler()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.Shutdown(ctx)
		srv.Close()
	})
	return srv, tbl
}

type note struct {
	ID        string `tide:"id,pk"`
	ProjectID string `tide:"project_id,scope"`
}

func headerPrincipal(r *http.Request) (authz.Principal, error) {
	switch r.Header.Get("X-User") {
	case "":
		return authz.Anonymous, nil
	case "ops":
		return authz.Principal{ID: "ops", Claims: map[string]any{"ops": true, "projects": []string{"p7"}}}, nil
	default:
		return authz.Principal{ID: r.Header.Get("X-User"), Claims: map[string]any{"projects": []string{"p7"}}}, nil
	}
}

func get(t *testing.T, url, user string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if user != "" {
		req.Header.Set("X-User", user)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestStatusPagePolicy: the page and its JSON refuse a principal the policy
// denies (403), an anonymous caller (401) and everyone without a policy, and
// serve an allowed one with the live counts.
func TestStatusPagePolicy(t *testing.T) {
	srv, tbl := statusServer(t, opsOnly, headerPrincipal)
	if err := tbl.Upsert(context.Background(), todo{"t1", "p7", "x"}); err != nil {
		t.Fatal(err)
	}
	c := tidetest.Dial(t, "ws"+strings.TrimPrefix(srv.URL, "http")+"/tide/ws", tidetest.WithHeader("X-User", "alice"))
	c.Hello(protocol.ClientFrame{})
	c.Subscribe("s", "todos", map[string]any{"project_id": "p7"})
	c.Collect("s")

	for _, path := range []string{"/tide/status", "/tide/status?format=json"} {
		if code, body := get(t, srv.URL+path, "alice"); code != http.StatusForbidden || strings.Contains(body, "connections") {
			t.Errorf("alice %s: %d %q", path, code, body)
		}
		if code, _ := get(t, srv.URL+path, ""); code != http.StatusUnauthorized {
			t.Errorf("anonymous %s: %d", path, code)
		}
	}
	code, body := get(t, srv.URL+"/tide/status", "ops")
	if code != http.StatusOK || !strings.Contains(body, "<title>tide status</title>") || strings.Contains(body, "src=\"http") || strings.Contains(body, "href=\"http") {
		t.Fatalf("ops page: %d", code)
	}
	code, body = get(t, srv.URL+"/tide/status?format=json", "ops")
	var rep struct {
		Connections   int64 `json:"connections"`
		Subscriptions int64 `json:"subscriptions"`
		ByResource    []struct {
			Resource string `json:"resource"`
			Count    int64  `json:"count"`
		} `json:"subscriptions_by_resource"`
	}
	if err := json.Unmarshal([]byte(body), &rep); code != http.StatusOK || err != nil {
		t.Fatalf("ops json: %d %v %q", code, err, body)
	}
	if rep.Connections != 1 || rep.Subscriptions != 1 || len(rep.ByResource) != 1 || rep.ByResource[0].Resource != "todos" {
		t.Fatalf("report %+v", rep)
	}

	// Without a policy the page refuses everyone.
	denyAll, _ := statusServer(t, nil, headerPrincipal)
	if code, _ := get(t, denyAll.URL+"/tide/status", "ops"); code != http.StatusForbidden {
		t.Errorf("nil policy: %d", code)
	}
	// Without the option there is no page.
	if code, _ := get(t, srv.URL+"/tide/nostatus", "ops"); code != http.StatusNotFound {
		t.Errorf("other path: %d", code)
	}
}

// TestStatusPageInChromium loads the page in headless Chromium, checks the
// script filled the counts and the table of subscriptions in, and leaves a screenshot in
// TIDE_STATUS_SCREENSHOT (or the test's temporary directory). It skips
// without chromium, except in CI.
func TestStatusPageInChromium(t *testing.T) {
	bin, err := exec.LookPath("chromium")
	if err != nil {
		testenv.Missing(t, "chromium is not installed", "apt-get install chromium")
	}
	ops := func(*http.Request) (authz.Principal, error) {
		return authz.Principal{ID: "ops", Claims: map[string]any{"ops": true, "projects": []string{"p7"}}}, nil
	}
	srv, tbl := statusServer(t, opsOnly, ops)
	for _, id := range []string{"a", "b", "c"} {
		if err := tbl.Upsert(context.Background(), todo{id, "p7", "x"}); err != nil {
			t.Fatal(err)
		}
	}
	ws := "ws" + strings.TrimPrefix(srv.URL, "http") + "/tide/ws"
	for range 3 {
		c := tidetest.Dial(t, ws)
		c.Hello(protocol.ClientFrame{})
		c.Subscribe("s", "todos", map[string]any{"project_id": "p7"})
		c.Collect("s")
	}
	for _, id := range []string{"d", "e"} {
		if err := tbl.Upsert(context.Background(), todo{id, "p7", "live"}); err != nil {
			t.Fatal(err)
		}
	}
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
	dom := string(chromium("--dump-dom", srv.URL+"/tide/status"))
	for _, want := range []string{`id="c-conn">3<`, `id="c-subs">3<`, "<path", ">todos<",
		"<th>lag</th>", "<td>todos where project_id = p7</td>", "<td>ops</td>", "<td>live</td>"} {
		if !strings.Contains(dom, want) {
			t.Errorf("rendered page lacks %q", want)
		}
	}
	shot := os.Getenv("TIDE_STATUS_SCREENSHOT")
	if shot == "" {
		shot = filepath.Join(t.TempDir(), "status.png")
	}
	chromium("--screenshot="+shot, srv.URL+"/tide/status")
	if fi, err := os.Stat(shot); err != nil || fi.Size() == 0 {
		t.Fatalf("no screenshot: %v", err)
	}
}

// TestStatusPageCarriesItsData: the page works behind any authentication
// the app's principal function accepts, not only cookies: it carries its
// report (node, roles, counts), so an operator whose proxy adds a header
// sees the data without the page making a request of its own. A
// subscription of several resources counts once in the total and under
// each resource.
func TestStatusPageCarriesItsData(t *testing.T) {
	bearer := func(r *http.Request) (authz.Principal, error) {
		if r.Header.Get("Authorization") == "Bearer ops-token" {
			return authz.Principal{ID: "ops", Claims: map[string]any{"ops": true, "projects": []string{"p7"}}}, nil
		}
		return authz.Anonymous, nil
	}
	srv, _ := statusServer(t, opsOnly, func(r *http.Request) (authz.Principal, error) {
		if r.Header.Get("X-User") != "" {
			return headerPrincipal(r)
		}
		return bearer(r)
	})
	c := tidetest.Dial(t, "ws"+strings.TrimPrefix(srv.URL, "http")+"/tide/ws", tidetest.WithHeader("X-User", "alice"))
	c.Hello(protocol.ClientFrame{})
	c.Send(protocol.ClientFrame{V: 1, Type: protocol.FrameSubscribe, ID: "m", Resources: []string{"todos", "notes"},
		Conditions: map[string]json.RawMessage{"project_id": json.RawMessage(`"p7"`)}})
	c.Collect("m")

	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/tide/status", nil)
	req.Header.Set("Authorization", "Bearer ops-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	const open = `<script type="application/json" id="data">`
	i := strings.Index(string(body), open)
	if resp.StatusCode != http.StatusOK || i < 0 {
		t.Fatalf("page: %d, data element found %v", resp.StatusCode, i >= 0)
	}
	data := string(body[i+len(open):])
	data = data[:strings.Index(data, "</script>")]
	var rep struct {
		Node          string `json:"node"`
		Roles         []any  `json:"roles"`
		Connections   int64  `json:"connections"`
		Subscriptions int64  `json:"subscriptions"`
		ByResource    []struct {
			Resource string `json:"resource"`
			Count    int64  `json:"count"`
		} `json:"subscriptions_by_resource"`
		Lagging []core.SubscriptionLag `json:"lagging_subscriptions"`
	}
	if err := json.Unmarshal([]byte(data), &rep); err != nil {
		t.Fatalf("embedded data %q: %v", data, err)
	}
	if rep.Node == "" || rep.Roles == nil || rep.Connections != 1 || rep.Subscriptions != 1 || len(rep.ByResource) != 2 ||
		rep.ByResource[0].Count != 1 || rep.ByResource[1].Count != 1 {
		t.Fatalf("embedded report %+v", rep)
	}
	// The subscription is listed once, with both its resources.
	if len(rep.Lagging) != 1 || rep.Lagging[0].Principal != "alice" || rep.Lagging[0].ID != "m" || rep.Lagging[0].Resource != "notes,todos" {
		t.Fatalf("lagging subscriptions %+v", rep.Lagging)
	}
	// The page's own request for fresh data, without the header, is
	// refused: the script then reloads the page.
	if code, _ := get(t, srv.URL+"/tide/status?format=json", ""); code != http.StatusUnauthorized {
		t.Fatalf("json without the header: %d", code)
	}
	if !strings.Contains(string(body), "location.reload()") {
		t.Fatal("the page does not fall back to reloading itself")
	}
}
