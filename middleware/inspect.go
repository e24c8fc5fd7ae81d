package middleware

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
)

// maxInspectKeyLen bounds the key parameter of the inspector: primary keys
// are compared as their canonical text.
const maxInspectKeyLen = 1024

// parseInspectQuery reads the inspector's query string: principal,
// resource and key (required), origin (optional), each at most once. Any
// other parameter, or a bad value, is a bad_frame error naming it.
func parseInspectQuery(v url.Values) (core.InspectQuery, *protocol.Error) {
	var q core.InspectQuery
	for name, vals := range v {
		var dst *string
		max := protocol.MaxNameLen
		switch name {
		case "principal":
			dst, max = &q.Principal, maxInspectKeyLen
		case "origin":
			dst, max = &q.Origin, protocol.MaxOriginLen
		case "resource":
			dst = &q.Resource
		case "key":
			dst, max = &q.Key, maxInspectKeyLen
		default:
			shown := name
			if name == "" || protocol.CheckText("name", name, 64) != nil {
				shown = "(unnamed)" // not echoed: an empty, long or binary name
			}
			return core.InspectQuery{}, badInspectParam(shown, protocol.Errorf(protocol.CodeBadFrame, "unknown parameter"))
		}
		if len(vals) != 1 {
			return core.InspectQuery{}, badInspectParam(name, protocol.Errorf(protocol.CodeBadFrame, "%s is given %d times", name, len(vals)))
		}
		if err := protocol.CheckText(name, vals[0], max); err != nil {
			return core.InspectQuery{}, badInspectParam(name, err)
		}
		*dst = vals[0]
	}
	for _, req := range []struct {
		name string
		v    string
	}{{"principal", q.Principal}, {"resource", q.Resource}, {"key", q.Key}} {
		if req.v == "" {
			return core.InspectQuery{}, badInspectParam(req.name, protocol.Errorf(protocol.CodeBadFrame, "%s is required", req.name))
		}
	}
	return q, nil
}

// badInspectParam names the parameter in err's detail.
func badInspectParam(name string, err *protocol.Error) *protocol.Error {
	err.Detail = "parameter: " + name
	return err
}

// isInspect reports whether r is for the inspector: <prefix>/status/inspect,
// served with the status page.
func (h *handler) isInspect(r *http.Request) bool {
	return h.statusPath != "" && r.URL.Path == h.statusPath+"/inspect"
}

// serveInspect answers GET <prefix>/status/inspect with the engine's
// InspectReport as JSON, under the status page's policy.
func (h *handler) serveInspect(w http.ResponseWriter, r *http.Request) {
	if !h.statusAllowed(w, r) {
		return
	}
	q, perr := parseInspectQuery(r.URL.Query())
	if perr != nil {
		writeError(w, http.StatusBadRequest, perr)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	rep, err := h.e.Inspect(ctx, q)
	switch {
	case errors.Is(err, core.ErrInspectUnknownResource):
		writeError(w, http.StatusBadRequest, badInspectParam("resource", protocol.Errorf(protocol.CodeUnknownResource, "no resource %q", q.Resource)))
		return
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, protocol.Errorf(protocol.CodeUnavailable, "inspect: %v", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_ = json.NewEncoder(w).Encode(rep)
}
