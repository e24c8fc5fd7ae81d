package core_test

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tidesync/tide/core"
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
		`{"v":1,"type":"sub`, `null`, `[]`, `{}`, "\xff\xfe",
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
	ts := httptest.NewServer(middleware.Handler(e, middleware.WithPrincipal(headerPrincipal)))
	url := "ws" + strings.TrimPrefix(ts.URL, "http") + "/tide/ws"
	var (
		mu    sync.Mutex
		ws    *websocket.Conn
		probe int
	)
	f.Cleanup(func() {
		if ws != nil {
			ws.Close()
		}
		_ = e.Shutdown(f.Context())
		ts.Close()
	})
	dial := func(t *testing.T) {
		c, _, err := websocket.DefaultDialer.Dial(url, map[string][]string{"X-User": {"u"}, "X-Projects": {"p7,p8"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.WriteMessage(websocket.TextMessage, []byte(`{"v":1,"type":"hello"}`)); err != nil {
			t.Fatal(err)
		}
		ws = c
	}
	documentedClose := map[int]bool{core.ClosePolicy: true, core.CloseVersionSkew: true}
	f.Fuzz(func(t *testing.T, frame []byte) {
		mu.Lock()
		defer mu.Unlock()
		if ws == nil {
			dial(t)
		}
		probe++
		id := fmt.Sprintf("probe-%d", probe)
		if err := ws.WriteMessage(websocket.TextMessage, frame); err != nil {
			t.Fatal(err)
		}
		_ = ws.WriteMessage(websocket.TextMessage, []byte(`{"v":1,"type":"unsubscribe","id":"`+id+`"}`))
		for {
			_ = ws.SetReadDeadline(time.Now().Add(60 * time.Second)) // a failure bound only
			_, data, err := ws.ReadMessage()
			if err != nil {
				var ce *websocket.CloseError
				if ok := asCloseError(err, &ce); !ok || !documentedClose[ce.Code] {
					t.Fatalf("after %q: connection ended with %v", frame, err)
				}
				ws.Close()
				ws = nil
				return
			}
			fr, err := core.DecodeServerFrame(data)
			if err != nil {
				t.Fatalf("after %q: server sent an invalid frame %s: %v", frame, data, err)
			}
			if fr.Type == core.FrameError && fr.Code == "" {
				t.Fatalf("error frame without code: %s", data)
			}
			if fr.Type == core.FrameError && fr.ID == id {
				return // the probe's answer: the connection still serves
			}
		}
	})
}

func asCloseError(err error, target **websocket.CloseError) bool {
	ce, ok := err.(*websocket.CloseError)
	if ok {
		*target = ce
	}
	return ok
}
