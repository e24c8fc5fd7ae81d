module github.com/tidesync/tide

go 1.26.0

require github.com/gorilla/websocket v1.5.3
