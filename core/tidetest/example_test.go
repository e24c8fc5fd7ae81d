package tidetest_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/core/tidetest"
	"github.com/tidesync/tide/middleware"
)

type Todo struct {
	ID        string `tide:"id,pk"`
	ProjectID string `tide:"project_id,scope"`
	Title     string `tide:"title"`
}

// session stands in for an app's session middleware: the X-User header
// names a user who belongs to project p7.
func session(r *http.Request) (authz.Principal, error) {
	if u := r.Header.Get("X-User"); u != "" {
		return authz.Principal{ID: u, Claims: map[string]any{"projects": []string{"p7"}}}, nil
	}
	return authz.Anonymous, nil
}

// exampleT stands in for the *testing.T a real test passes to Dial.
type exampleT struct{ cleanups []func() }

func (*exampleT) Helper()                           {}
func (*exampleT) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (t *exampleT) Cleanup(f func())                { t.cleanups = append(t.cleanups, f) }
func (t *exampleT) done() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}

// A policy test: alice may read her project and is refused another.
func Example() {
	e, err := core.New(core.Config{})
	if err != nil {
		panic(err)
	}
	todos, err := core.Register(e, core.Resource[Todo]{Table: "todos", Authorize: authz.RequireClaim("project_id", "projects")})
	if err != nil {
		panic(err)
	}
	_ = todos.Upsert(context.Background(), Todo{"t1", "p7", "write the docs"})
	srv := httptest.NewServer(middleware.Middleware(e, middleware.WithPrincipal(session))(http.NotFoundHandler()))
	defer e.Shutdown(context.Background())
	defer srv.Close()
	t := &exampleT{} // in a test: the test's *testing.T
	defer t.done()   // what the test's end does: Dial's cleanup closes c

	c := tidetest.Dial(t, "ws"+strings.TrimPrefix(srv.URL, "http")+"/tide/ws", tidetest.WithHeader("X-User", "alice"))
	c.Hello(protocol.ClientFrame{})
	c.Subscribe("mine", "todos", map[string]any{"project_id": "p7"})
	entries, _ := c.Collect("mine")
	fmt.Println("p7:", len(entries), "row, then caught-up")
	c.Subscribe("theirs", "todos", map[string]any{"project_id": "p9"})
	f := c.ExpectErrorFor("theirs", protocol.CodeForbidden)
	fmt.Println("p9:", f.Code)
	// Output:
	// p7: 1 row, then caught-up
	// p9: forbidden
}

// A fake clock moves only when told, and runs the timers due.
func ExampleClock() {
	clk := tidetest.NewClock(time.Date(2026, 11, 30, 15, 0, 0, 0, time.UTC))
	clk.AfterFunc(time.Minute, func() { fmt.Println("fired at", clk.Now().Format("15:04:05")) })
	stop := clk.AfterFunc(2*time.Minute, func() { fmt.Println("never") })
	clk.Advance(59 * time.Second)
	fmt.Println("at", clk.Now().Format("15:04:05"))
	clk.Advance(time.Second)
	fmt.Println("stopped:", stop())
	clk.Advance(time.Hour)
	// Output:
	// at 15:00:59
	// fired at 15:01:00
	// stopped: true
}
