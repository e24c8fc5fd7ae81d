package core_test

import (
	"net/http"
	"strings"

	"github.com/tidesync/tide/authz"
)

func headerPrincipal(r *http.Request) (authz.Principal, error) {
	u := r.Header.Get("X-User")
	if u == "" {
		return authz.Anonymous, nil
	}
	var projects []string
	if p := r.Header.Get("X-Projects"); p != "" {
		projects = strings.Split(p, ",")
	}
	return authz.Principal{ID: u, Claims: map[string]any{"projects": projects}}, nil
}
