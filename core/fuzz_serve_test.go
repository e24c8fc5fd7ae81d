package core_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/core/tidetest"
	"github.com/tidesync/tide/middleware"
)

// FuzzServeFrame sends arbitrary client frames to a live server over a real
// WebSocket. After each one the server must still answer a probe on the same
// connection, or have closed it with a documented code after a documented
// error; it must never panic (the server runs in this process).
func FuzzServeFrame(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"type":"subscribe","id":"s1","resource":"todos","conditions":{"project_id":"p7"}}`,
		`{"v":1,"type":"subscribe","id":"s2","resource":"todos","conditions":{"project_id":{"in":["p7","p8"]}},"cursor":"1.abc.3","limit":2}`,
		`{"v":1,"type":"subscribe","id":"s3","resource":"todos","cursor":"1s.x.1.a2V5"}`,
		`{"v":1,"type":"unsubscribe","id":"s1"}`,
		`{"v":1,"type":"refresh","token":"tide1.k.e30.sig"}`,
		`{"v":1,"type":"hello"}`,
		`{"v":2,"type":"hello"}`,
		`{"v":1,"type":"subscribe","id":"x","resource":"todos","conditions":{"project_id":[[[[]]]]}}`,
		`{"v":1,"type":"subscribe","id":"m1","resources":["todos","comments"],"conditions":{"project_id":"p7"},"limit":1}`,
		`{"v":1,"type":"subscribe","id":"m2","resources":["comments","todos"],"conditions":{"project_id":"p7"},"cursor":"1s.x.1.dG9kb3MAdDE"}`,
		`{"v":1,"type":"subscribe","id":"m3","resources":["todos","nope"]}`,
		`{"v":1,"type":"sub`, `null`, `[]`, `{}`, "\xff\xfe",
		`{"v":1,"type":"topic-subscribe","topic":"board:p7","state":{"x":1}}`,
		`{"v":1,"type":"publish","topic":"board:p7","data":{"x":1}}`,
		`{"v":1,"type":"presence-update","topic":"board:p7","state":"typing"}`,
		`{"v":1,"type":"topic-unsubscribe","topic":"board:p7"}`,
		`{"v":1,"type":"publish","topic":"board:p9","data":[]}`,
	} {
		f.Add([]byte(s))
	}
	e, err := core.New(core.Config{FrameRate: 1 << 20, FrameBurst: 1 << 20})
	if err != nil {
		f.Fatal(err)
	}
	todos, err := core.Register(e, core.Resource[todo]{Table: "todos", Authorize: projectPolicy})
	if err != nil {
		f.Fatal(err)
	}
	_ = todos.Upsert(f.Context(), todo{ID: "t1", ProjectID: "p7", Title: "x"})
	comments, err := core.Register(e, core.Resource[mtComment]{Table: "comments", Authorize: projectPolicy})
	if err != nil {
		f.Fatal(err)
	}
	_ = comments.Upsert(f.Context(), mtComment{ID: "c1", ProjectID: "p7"})
	if err := core.RegisterChannel(e, core.Channel[json.RawMessage]{Pattern: "board:{project_id}", Subscribe: projectPolicy, Publish: projectPolicy, Presence: true}); err != nil {
		f.Fatal(err)
	}
	ts := httptest.NewServer(middleware.Middleware(e, middleware.WithPrincipal(headerPrincipal))(http.NotFoundHandler()))
	url := "ws" + strings.TrimPrefix(ts.URL, "http") + "/tide/ws"
	var (
		mu    sync.Mutex
		conn  *tidetest.Conn // shared by the inputs, so their effects add up
		probe int
	)
	f.Cleanup(func() {
		if conn != nil {
			conn.Close()
		}
		_ = e.Shutdown(f.Context())
		ts.Close()
	})
	documentedClose := map[int]bool{int(protocol.ClosePolicy): true, int(protocol.CloseVersionSkew): true}
	f.Fuzz(func(t *testing.T, frame []byte) {
		mu.Lock()
		defer mu.Unlock()
		if conn == nil {
			conn = tidetest.Dial(t, url, tidetest.WithHeader("X-User", "u"), tidetest.WithHeader("X-Projects", "p7,p8"),
				tidetest.WithTimeout(time.Minute), // a failure bound only
				tidetest.WithoutCleanup())         // it outlives this input; f.Cleanup closes it
			conn.Send(tidetest.HelloFrame(protocol.ClientFrame{}))
		}
		c := conn.For(t)
		probe++
		id := fmt.Sprintf("probe-%d", probe)
		c.Send(frame)
		// The frame may have ended the connection: the probe's write may fail.
		_ = c.WebSocket().WriteMessage(websocket.TextMessage, []byte(`{"v":1,"type":"unsubscribe","id":"`+id+`"}`))
		for {
			fr, data, err := c.ReadFrame()
			if err != nil && data == nil {
				var ce *websocket.CloseError
				if !errors.As(err, &ce) || !documentedClose[ce.Code] {
					t.Fatalf("after %q: connection ended with %v", frame, err)
				}
				conn.Close()
				conn = nil
				return
			}
			if err != nil {
				t.Fatalf("after %q: server sent an invalid frame: %v", frame, err)
			}
			if fr.Type == protocol.FrameError && fr.Code == "" {
				t.Fatalf("error frame without code: %s", data)
			}
			if fr.Type == protocol.FrameError && fr.ID == id {
				return // the probe's answer: the connection still serves
			}
		}
	})
}
