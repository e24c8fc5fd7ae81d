// Package protocol is tide's wire vocabulary, shared by the server and its
// clients: frame types and their encoders and decoders, cursors, stable
// error codes, close codes and reset reasons, and the row codec that maps
// a Go struct's `tide:"…"` tags to the JSON rows frames carry.
// docs/protocol.md specifies the protocol itself.
//
// A Go client depends on this package and on nothing of the engine:
//
//	f, err := protocol.DecodeServerFrame(data)
//	if err == nil && f.Type == protocol.FrameChanges {
//		for _, e := range f.Entries {
//			todo, err := protocol.DecodeRow[Todo](e.Row)
//			…
//		}
//	}
//
// Decoders never panic on any input: a bad frame is an error (a *Error with
// a stable Code for client frames). Codes never change meaning; new ones
// may be added.
package protocol
