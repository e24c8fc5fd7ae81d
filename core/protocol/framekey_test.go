package protocol

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestScanFrameKey(t *testing.T) {
	big := `"args":{"t":"` + strings.Repeat("x", 300) + `"}`
	for _, tt := range []struct {
		name, in string
		typ, key string
		ok       bool
	}{
		{"key after type", `{"v":1,"type":"mutate","key":"k1",` + big + `}`, "mutate", "k1", true},
		{"cut after the key", `{"v":1,"type":"mutate","key":"k1","args":{"t":"xxx`, "mutate", "k1", true},
		{"cut inside the key", `{"v":1,"type":"mutate","key":"k1`, "mutate", "", false},
		{"key after a long value, cut before it", `{"type":"mutate",` + big[:100], "mutate", "", false},
		{"key after nested values", `{"type":"mutate","args":{"a":[1,{"key":"inner"}],"s":"}]\""},"key":"outer"}`, "mutate", "outer", true},
		{"type after key", `{"key":"k2","type":"mutate"}`, "mutate", "k2", true},
		{"no type", `{"v":1,"key":"k3","args":{}}`, "", "k3", true},
		{"escapes", `{"type":"mu\u0074ate","k\u0065y":"a\"b\u00e9\n"}`, "mutate", "a\"b\u00e9\n", true},
		{"case-insensitive names, as encoding/json", `{"TYPE":"mutate","Key":"k4"}`, "mutate", "k4", true},
		{"the last repeated member wins", `{"key":"a","type":"mutate","key":"b"}`, "mutate", "b", true},
		{"null leaves it", `{"key":"a","key":null}`, "", "a", true},
		{"a number is not a key", `{"type":"mutate","key":7}`, "mutate", "", false},
		{"empty key", `{"type":"mutate","key":""}`, "mutate", "", true},
		{"not an object", `["type","mutate","key","k"]`, "", "", false},
		{"malformed before the key", `{"type":"mutate",,"key":"k"}`, "mutate", "", false},
		{"a literal cut at the end", `{"type":"mutate","seq":12`, "mutate", "", false},
		{"whitespace", " \n{ \"type\" : \"mutate\" ,\t\"key\" : \"k5\" } ", "mutate", "k5", true},
		{"empty", ``, "", "", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			typ, key, ok := ScanFrameKey([]byte(tt.in))
			if typ != tt.typ || key != tt.key || ok != tt.ok {
				t.Fatalf("ScanFrameKey(%.80q) = %q, %q, %v; want %q, %q, %v", tt.in, typ, key, ok, tt.typ, tt.key, tt.ok)
			}
		})
	}
}

// TestScanFrameKeyEveryCut: a frame cut anywhere after its key still shows
// the key, and cut anywhere before shows none.
func TestScanFrameKeyEveryCut(t *testing.T) {
	frame := []byte(`{"v":1,"type":"mutate","key":"k-\u00e9\\\"1","seq":3,"resource":"todos","name":"add","args":{"title":"` + strings.Repeat("y", 100) + `"},"at":1}`)
	end := bytes.Index(frame, []byte(`,"seq"`))
	for n := 0; n <= len(frame); n++ {
		_, key, ok := ScanFrameKey(frame[:n])
		if n >= end && (!ok || key != "k-\u00e9\\\"1") {
			t.Fatalf("cut at %d (key ends at %d): %q, %v", n, end, key, ok)
		}
		if n < end && ok {
			t.Fatalf("cut at %d, inside the key: read %q", n, key)
		}
	}
}

func FuzzScanFrameKey(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"type":"mutate","key":"k1","seq":1,"resource":"todos","name":"add","args":{"id":"t1"},"at":1764590000000}`,
		`{"type":"mutate","args":{"a":[1,{"key":"inner"}],"s":"}]\""},"key":"outer"}`,
		`{"KEY":"a","key":null,"Type":"m\u0075tate"}`,
		`{"\u212Aey":"kelvin"}`,
		"{\"key\":\"\xff\xfe\"}",
		`{"key":"\ud800"}`,
		`{"type":"mutate","key":"k1"`,
		`[]`, `{`, `"key"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		typ, key, ok := ScanFrameKey(data)
		for n := range min(len(data), 64) {
			ScanFrameKey(data[:n]) // no panic on any cut
		}
		if !ok && key != "" {
			t.Fatalf("key %q without ok", key)
		}
		if t := bytes.TrimLeft(data, " \t\r\n"); len(t) == 0 || t[0] != '{' {
			return
		}
		var want struct {
			Type string `json:"type"`
			Key  string `json:"key"`
		}
		if json.Unmarshal(data, &want) != nil {
			return
		}
		if typ != want.Type || key != want.Key {
			t.Fatalf("ScanFrameKey(%q) = %q, %q; encoding/json reads %q, %q", data, typ, key, want.Type, want.Key)
		}
	})
}
