package core_test

import (
	"encoding/json"
	"net/http"
	"reflect"
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

func jsonEqual(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}
