package core

import (
	"io"
	"net"
	"time"
)

// Socket is an upgraded WebSocket connection, the engine's side of one
// client. Message types are RFC 6455's (1 text, 8 close, 9 ping, 10 pong).
// gorilla/websocket's *Conn satisfies it as it is; package middleware
// upgrades HTTP requests and hands the result to Engine.Accept, so an app
// rarely meets this type. The engine calls NextReader from one goroutine
// and the write methods from one other, as gorilla requires.
type Socket interface {
	NextReader() (messageType int, r io.Reader, err error)
	WriteMessage(messageType int, data []byte) error
	WriteControl(messageType int, data []byte, deadline time.Time) error
	SetReadLimit(limit int64)
	SetReadDeadline(t time.Time) error
	SetWriteDeadline(t time.Time) error
	SetPongHandler(h func(appData string) error)
	// NetConn returns the underlying connection, closed to end a
	// connection at once.
	NetConn() net.Conn
	Close() error
}
