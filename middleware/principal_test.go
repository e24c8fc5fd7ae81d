package middleware

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/tidesync/tide/authz"
)

// TestPrincipalHeaderValue: an id of plain characters is sent as it is,
// any other percent-encoded, and percent-decoding the value always gives
// the id back; an id that is not UTF-8 is not sent.
func TestPrincipalHeaderValue(t *testing.T) {
	for _, tt := range []struct {
		id, want string
		ok       bool
	}{
		{"alice", "alice", true},
		{"alice@example.com", "alice@example.com", true},
		{"user:42/a+b=c", "user:42/a+b=c", true},
		{"50%", "50%25", true},
		{"Zoë Ø", "Zo%C3%AB%20%C3%98", true},
		{"a\r\nSet-Cookie: x=1", "a%0D%0ASet-Cookie:%20x=1", true},
		{"tab\there\x7f", "tab%09here%7F", true},
		{"", "", false},
		{"bad\xffutf8", "", false},
	} {
		got, ok := principalHeaderValue(tt.id)
		if got != tt.want || ok != tt.ok {
			t.Errorf("%q: %q, %v; want %q, %v", tt.id, got, ok, tt.want, tt.ok)
			continue
		}
		if !ok {
			continue
		}
		if back, err := url.PathUnescape(got); err != nil || back != tt.id {
			t.Errorf("%q: %q decodes to %q, %v", tt.id, got, back, err)
		}
		for i := 0; i < len(got); i++ {
			if c := got[i]; c <= ' ' || c >= 0x7f {
				t.Errorf("%q: %q holds byte %#x", tt.id, got, c)
			}
		}
	}
	h := http.Header{}
	setPrincipalHeader(h, authz.Anonymous)
	if _, set := h[PrincipalHeader]; set {
		t.Errorf("anonymous: %v", h)
	}
}
