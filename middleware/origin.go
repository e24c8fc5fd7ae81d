package middleware

import (
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/tidesync/tide/core/protocol"
)

// originAllowed decides whether a request may use tide's endpoints with the
// credentials the browser attached (see WithAllowedOrigins). Browsers send
// Origin on every WebSocket upgrade and every cross-origin POST, so a
// cross-site page can neither open a socket with the user's cookie nor
// poll with it.
func (o *options) originAllowed(r *http.Request) bool {
	if o.checkOrigin != nil {
		return o.checkOrigin(r)
	}
	values := r.Header.Values("Origin")
	switch len(values) {
	case 0:
		return true // not a browser: no ambient credentials to abuse
	case 1:
	default:
		return false
	}
	u, err := url.Parse(values[0])
	if err != nil || u.Host == "" {
		return false // includes "null", sent by sandboxed and file: pages
	}
	if strings.EqualFold(u.Host, r.Host) {
		return true
	}
	if len(o.allowedOrigins) == 0 {
		return false
	}
	n, err := normalizeOrigin(values[0])
	return err == nil && o.allowedOrigins[n]
}

// refuseOrigin answers a request from an origin that is not allowed.
func refuseOrigin(w http.ResponseWriter, r *http.Request) {
	writeError(w, http.StatusForbidden, &protocol.Error{Code: protocol.CodeForbidden,
		Message: "origin " + truncate(r.Header.Get("Origin"), 128) + " is not allowed; see middleware.WithAllowedOrigins"})
}

// normalizeOrigin returns "scheme://host[:port]" in lower case, without the
// scheme's default port, as browsers send it.
func normalizeOrigin(origin string) (string, error) {
	u, err := url.Parse(strings.TrimSuffix(origin, "/"))
	switch {
	case err != nil:
		return "", err
	case u.Scheme == "" || u.Host == "":
		return "", errors.New("want scheme://host[:port]")
	case u.User != nil || u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "":
		return "", errors.New("an origin has no user, path, query or fragment")
	}
	scheme, host := strings.ToLower(u.Scheme), strings.ToLower(u.Host)
	if port := u.Port(); (scheme == "https" && port == "443") || (scheme == "http" && port == "80") {
		host = strings.TrimSuffix(host, ":"+port)
	}
	return scheme + "://" + host, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
