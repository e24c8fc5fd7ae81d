package middleware

import (
	"net/url"
	"testing"
)

// FuzzInspectQuery: any query string parses into a query with the required
// parameters set, or a bad_frame error naming a parameter; never a panic.
func FuzzInspectQuery(f *testing.F) {
	for _, s := range []string{
		"principal=alice&resource=todos&key=t1",
		"principal=alice&resource=todos&key=t1&origin=laptop",
		"principal=alice&resource=todos",
		"principal=a&principal=b&resource=todos&key=t1",
		"key=%00&resource=todos&principal=x",
		"principal=%ff&resource=todos&key=t1",
		"x=1",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		v, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		q, perr := parseInspectQuery(v)
		if perr != nil {
			if perr.Code != "bad_frame" || len(perr.Detail) <= len("parameter: ") {
				t.Fatalf("%q: error %+v", raw, perr)
			}
			return
		}
		if q.Principal == "" || q.Resource == "" || q.Key == "" {
			t.Fatalf("%q: accepted without a required parameter: %+v", raw, q)
		}
		if q.Principal != v.Get("principal") || q.Key != v.Get("key") || q.Resource != v.Get("resource") || q.Origin != v.Get("origin") {
			t.Fatalf("%q: parsed %+v", raw, q)
		}
	})
}
