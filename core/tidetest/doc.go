// Package tidetest helps test code that serves tide: an app's policies and
// row filters, and tide's own engine, middleware and clients.
//
// It has two parts:
//
//   - Conn, a wire-level client. Dial opens a WebSocket to a tide endpoint
//     (typically an httptest.Server in front of the app, or of
//     middleware.Middleware(e)(http.NotFoundHandler())); the
//     test then sends client frames (Hello, Subscribe, Send) and asserts on
//     what the server answers (Expect, ExpectError, Collect, ExpectClose).
//     Frames are decoded with protocol.DecodeServerFrame, so the assertions
//     are about the protocol itself, not about a client library.
//   - Clock, a fake clock for core.Config.Clock and
//     authz.KeyringConfig.Now, which moves only on Advance: token expiry and
//     refresh requests happen exactly when the test says.
//
// Reads skip the server's heartbeat ping frames, as a client's transport
// would (WithPingFrames shows them to a test of the heartbeat itself).
// Every read is bounded (DefaultTimeout, 30 s) so a hung test fails with a
// clear message instead of hanging; the bound is far above any real wait and
// is not an assertion about speed. Failures are reported with t.Fatalf, and
// connections are closed by t.Cleanup, so nothing outlives its test.
//
// tidetest depends only on core/protocol and gorilla/websocket, not on core,
// so tide's own tests in package core can use it too.
//
// A test of an app's policy:
//
//	func TestOnlyMembersSeeAProject(t *testing.T) {
//		e, _ := core.New(core.Config{})
//		_, _ = core.Register(e, core.Resource[Todo]{Table: "todos",
//			Authorize: authz.RequireClaim("project_id", "projects")})
//		srv := httptest.NewServer(middleware.Middleware(e, middleware.WithPrincipal(session))(http.NotFoundHandler()))
//		defer srv.Close()
//		defer e.Shutdown(context.Background())
//
//		c := tidetest.Dial(t, "ws"+strings.TrimPrefix(srv.URL, "http")+"/tide/ws",
//			tidetest.WithHeader("Cookie", "session=alice"))
//		c.Hello(protocol.ClientFrame{})
//		c.Subscribe("mine", "todos", map[string]any{"project_id": "p7"})
//		c.Collect("mine") // the snapshot, up to caught-up
//		c.Subscribe("theirs", "todos", map[string]any{"project_id": "p9"})
//		c.ExpectErrorFor("theirs", protocol.CodeForbidden)
//	}
package tidetest
