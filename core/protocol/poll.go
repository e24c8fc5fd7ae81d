package protocol

import "encoding/json"

// PollRequest is the body of POST <prefix>/changes: it asks for the next
// page of a scope, for clients that poll over plain HTTP instead of
// holding a WebSocket. Its fields mean what they mean in a subscribe
// frame.
type PollRequest struct {
	V          int                        `json:"v"`
	Resource   string                     `json:"resource"`
	Resources  []string                   `json:"resources,omitempty"`
	Conditions map[string]json.RawMessage `json:"conditions,omitempty"`
	Cursor     string                     `json:"cursor,omitempty"`
	Limit      int                        `json:"limit,omitempty"`
}
