package protocol

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/tidesync/tide/internal/jsontext"
)

func TestDecodeClientFrame(t *testing.T) {
	long := strings.Repeat("x", 200)
	tests := []struct {
		name string
		in   string
		code Code // "" means valid
	}{
		{"hello", `{"v":1,"type":"hello","build":"b1","origin":"o1"}`, ""},
		{"hello with token", `{"v":1,"type":"hello","token":"t"}`, ""},
		{"subscribe", `{"v":1,"type":"subscribe","id":"s1","resource":"todos","conditions":{"project_id":"p7"},"cursor":"1.e.1","limit":10}`, ""},
		{"unsubscribe", `{"v":1,"type":"unsubscribe","id":"s1"}`, ""},
		{"refresh", `{"v":1,"type":"refresh","token":"t"}`, ""},
		{"unknown fields ignored", `{"v":1,"type":"hello","future":[1,2]}`, ""},
		{"empty", ``, CodeBadFrame},
		{"not json", `hello`, CodeBadFrame},
		{"array", `[1]`, CodeBadFrame},
		{"truncated", `{"v":1,"type":"hel`, CodeBadFrame},
		{"trailing garbage", `{"v":1,"type":"hello"}x`, CodeBadFrame},
		{"missing v", `{"type":"hello"}`, CodeBadFrame},
		{"v as string", `{"v":"1","type":"hello"}`, CodeBadFrame},
		{"v2", `{"v":2,"type":"hello"}`, CodeUnsupportedVersion},
		{"v negative", `{"v":-1,"type":"hello"}`, CodeUnsupportedVersion},
		{"missing type", `{"v":1}`, CodeBadFrame},
		{"unknown type", `{"v":1,"type":"explode"}`, CodeUnknownType},
		{"type wrong kind", `{"v":1,"type":7}`, CodeBadFrame},
		{"subscribe without id", `{"v":1,"type":"subscribe","resource":"todos"}`, CodeBadFrame},
		{"subscribe without resource", `{"v":1,"type":"subscribe","id":"s"}`, CodeBadFrame},
		{"subscribe id too long", `{"v":1,"type":"subscribe","id":"` + long + `","resource":"todos"}`, CodeBadFrame},
		{"subscribe id control char", `{"v":1,"type":"subscribe","id":"a\nb","resource":"todos"}`, CodeBadFrame},
		{"subscribe conditions not object", `{"v":1,"type":"subscribe","id":"s","resource":"todos","conditions":[1]}`, CodeBadFrame},
		{"subscribe negative limit", `{"v":1,"type":"subscribe","id":"s","resource":"todos","limit":-1}`, CodeBadFrame},
		{"subscribe fractional limit", `{"v":1,"type":"subscribe","id":"s","resource":"todos","limit":1.5}`, CodeBadFrame},
		{"subscribe cursor too long", `{"v":1,"type":"subscribe","id":"s","resource":"todos","cursor":"` + strings.Repeat("c", 1100) + `"}`, CodeInvalidCursor},
		{"subscribe resources", `{"v":1,"type":"subscribe","id":"s","resources":["todos","comments"],"conditions":{"project_id":"p7"}}`, ""},
		{"subscribe resources with resource among them", `{"v":1,"type":"subscribe","id":"s","resource":"todos","resources":["todos","comments"]}`, ""},
		{"subscribe resource outside resources", `{"v":1,"type":"subscribe","id":"s","resource":"notes","resources":["todos","comments"]}`, CodeBadFrame},
		{"subscribe resources twice", `{"v":1,"type":"subscribe","id":"s","resources":["todos","todos"]}`, CodeBadFrame},
		{"subscribe resources empty name", `{"v":1,"type":"subscribe","id":"s","resources":["todos",""]}`, CodeBadFrame},
		{"subscribe resources name too long", `{"v":1,"type":"subscribe","id":"s","resources":["` + long + `"]}`, CodeBadFrame},
		{"subscribe resources not strings", `{"v":1,"type":"subscribe","id":"s","resources":[1]}`, CodeBadFrame},
		{"subscribe too many resources", `{"v":1,"type":"subscribe","id":"s","resources":["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]}`, CodeBadFrame},
		{"subscribe empty resources", `{"v":1,"type":"subscribe","id":"s","resources":[]}`, CodeBadFrame},
		{"unsubscribe without id", `{"v":1,"type":"unsubscribe"}`, CodeBadFrame},
		{"refresh without token", `{"v":1,"type":"refresh"}`, CodeBadFrame},
		{"hello build too long", `{"v":1,"type":"hello","build":"` + long + `"}`, CodeBadFrame},
		{"hello token too long", `{"v":1,"type":"hello","token":"` + strings.Repeat("t", 9000) + `"}`, CodeBadFrame},
		{"mutate", `{"v":1,"type":"mutate","key":"k1","seq":3,"resource":"todos","name":"add","args":{"title":"x"},"at":1764590000000}`, ""},
		{"mutate without args", `{"v":1,"type":"mutate","key":"k1","resource":"todos","name":"clear","at":1}`, ""},
		{"mutate without key", `{"v":1,"type":"mutate","resource":"todos","name":"add","at":1}`, CodeBadFrame},
		{"mutate key too long", `{"v":1,"type":"mutate","key":"` + long + `","resource":"todos","name":"add","at":1}`, CodeBadFrame},
		{"mutate without resource", `{"v":1,"type":"mutate","key":"k","name":"add","at":1}`, CodeBadFrame},
		{"mutate without name", `{"v":1,"type":"mutate","key":"k","resource":"todos","at":1}`, CodeBadFrame},
		{"mutate without at", `{"v":1,"type":"mutate","key":"k","resource":"todos","name":"add"}`, CodeBadFrame},
		{"mutate negative seq", `{"v":1,"type":"mutate","key":"k","seq":-1,"resource":"todos","name":"add","at":1}`, CodeBadFrame},
		{"mutate args not object", `{"v":1,"type":"mutate","key":"k","resource":"todos","name":"add","args":[1],"at":1}`, CodeInvalidArgs},
		{"mutate with traceparent", `{"v":1,"type":"mutate","key":"k","resource":"todos","name":"add","at":1,"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}`, ""},
		{"mutate traceparent too long", `{"v":1,"type":"mutate","key":"k","resource":"todos","name":"add","at":1,"traceparent":"` + long + `"}`, CodeBadFrame},
		{"mutate traceparent control character", `{"v":1,"type":"mutate","key":"k","resource":"todos","name":"add","at":1,"traceparent":"00-\u0007"}`, CodeBadFrame},
		{"invalid utf8 id", "{\"v\":1,\"type\":\"unsubscribe\",\"id\":\"\xff\"}", ""}, // encoding/json replaces invalid UTF-8 with U+FFFD
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeClientFrame([]byte(tt.in))
			switch {
			case tt.code == "" && err != nil:
				t.Fatalf("unexpected error %v", err)
			case tt.code != "" && err == nil:
				t.Fatalf("accepted, want %s", tt.code)
			case tt.code != "" && err.Code != tt.code:
				t.Fatalf("code %s (%s), want %s", err.Code, err.Message, tt.code)
			}
		})
	}
}

func FuzzDecodeClientFrame(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"type":"hello","build":"b","origin":"o","token":"t"}`,
		`{"v":1,"type":"subscribe","id":"s1","resource":"todos","conditions":{"project_id":"p7","n":{"in":[1,2]}},"cursor":"1.e.5","limit":10}`,
		`{"v":1,"type":"unsubscribe","id":"s1"}`,
		`{"v":1,"type":"refresh","token":"x"}`,
		`{"v":1,"type":"mutate","key":"k1","seq":1,"resource":"todos","name":"add","args":{"id":"t1"},"at":1764590000000}`,
		`{"v":2}`, `{}`, `[]`, `null`, `{"v":1,"type":"subscribe","id":"\u0000"}`,
		`{"v":1,"type":"subscribe","id":"m","resources":["todos","comments"],"conditions":{"project_id":"p7"},"cursor":"1s.e.5.dG9kb3MAazE"}`,
		`{"v":1,"type":"subscribe","id":"m","resource":"x","resources":["todos","todos"]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fr, err := DecodeClientFrame(data)
		if err != nil {
			if err.Code == "" {
				t.Fatal("error without code")
			}
			// An error frame for it must itself be valid JSON.
			if !json.Valid(ErrorFrame(fr.ID, err)) {
				t.Fatalf("error frame for %q is not valid JSON", data)
			}
			return
		}
		if fr.V != Version {
			t.Fatalf("accepted version %d", fr.V)
		}
		switch fr.Type {
		case FrameSubscribe:
			if fr.ID == "" || (fr.Resource == "" && len(fr.Resources) == 0) || fr.Limit < 0 || len(fr.Resources) > MaxResourcesN {
				t.Fatalf("accepted incomplete subscribe %+v", fr)
			}
			for i, r := range fr.Resources {
				if r == "" || slices.Contains(fr.Resources[:i], r) {
					t.Fatalf("accepted resources %q", fr.Resources)
				}
			}
			if fr.Resource != "" && len(fr.Resources) > 0 && !slices.Contains(fr.Resources, fr.Resource) {
				t.Fatalf("accepted resource %q outside resources %q", fr.Resource, fr.Resources)
			}
		case FrameUnsubscribe:
			if fr.ID == "" {
				t.Fatal("accepted unsubscribe without id")
			}
		case FrameMutate:
			if fr.Key == "" || fr.Resource == "" || fr.Name == "" || fr.Seq < 0 || fr.At <= 0 || len(fr.Key) > MaxKeyLen {
				t.Fatalf("accepted incomplete mutate %+v", fr)
			}
		case FrameHello, FrameRefresh:
		case FrameTopicSubscribe, FrameTopicUnsubscribe, FramePublish, FramePresenceUpdate:
			if fr.Topic == "" {
				t.Fatalf("accepted %s without topic", fr.Type)
			}
		default:
			t.Fatalf("accepted type %q", fr.Type)
		}
	})
}

func FuzzDecodeServerFrame(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"type":"welcome","build":"b","limits":{"max_frame_bytes":1,"max_subscriptions":2}}`,
		`{"v":1,"type":"changes","id":"s","cursor":"1.e.2","entries":[{"op":"upsert","key":"k","row":{"a":1}},{"op":"delete","key":"j"}]}`,
		`{"v":1,"type":"caught-up","id":"s","cursor":"1.e.2"}`,
		`{"v":1,"type":"reset","id":"s","reason":"cursor_expired"}`,
		`{"v":1,"type":"error","code":"forbidden","message":"no"}`,
		`{"v":1,"type":"changes","id":"s","entries":[{"op":"upsert","key":"k"}]}`,
		`{"v":1,"type":"ack","key":"k1","cursor":"1.e.9","entries":[{"op":"upsert","key":"t1","row":{"a":1},"resource":"todos"}]}`,
		`{"v":1,"type":"ack","key":"k1","cursor":"1.e.9","replayed":true,"entries":[]}`,
		`{"v":1,"type":"reject","key":"k1","code":"conflict","message":"taken"}`,
		`{"v":1,"type":"ack","key":"k1","entries":[{"op":"upsert","key":"t1"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fr, err := DecodeServerFrame(data)
		if err != nil {
			return
		}
		if fr.Type == FrameChanges {
			for _, e := range fr.Entries {
				if e.Op == "upsert" && len(e.Row) == 0 {
					t.Fatal("accepted an upsert without a row")
				}
			}
		}
	})
}

func TestEncodedFramesAreValidJSON(t *testing.T) {
	weird := "q\"\\\n\t\x01\xff\u2028<>&é"
	frames := [][]byte{
		Welcome(weird, weird, 1, Limits{MaxFrameBytes: 1, MaxSubscriptions: 2}),
		CaughtUp(weird, weird),
		Reset(weird, ResetReason(weird)),
		Reset("", ResetCursorExpired), // the polling form
		ErrorFrame(weird, &Error{Code: CodeForbidden, Message: weird}),
		ErrorFrame("", &Error{Code: CodeForbidden, Message: weird}),
		UpdateAvailable(weird),
		Ack(weird, weird, AppendEntry(nil, "upsert", weird, json.RawMessage(`{"a":1}`), weird), true),
		Ack(weird, weird, nil, false),
		Reject(weird, &Error{Code: CodeConflict, Message: weird}),
		RefreshToken(30),
		AppendChangesEnd(append(AppendChangesStart(nil, jsontext.AppendString(nil, weird), weird), AppendEntry(nil, "upsert", weird, json.RawMessage(`{"a":1}`), weird)...)),
	}
	for _, fr := range frames {
		if !json.Valid(fr) {
			t.Fatalf("invalid JSON: %s", fr)
		}
		got, err := DecodeServerFrame(fr)
		if err != nil {
			t.Fatalf("DecodeServerFrame(%s): %v", fr, err)
		}
		if got.V != Version {
			t.Fatalf("frame without version: %s", fr)
		}
	}
}

// FuzzDecodeChangesFast: wherever the fast path answers, encoding/json
// decodes the same frame.
func FuzzDecodeChangesFast(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"type":"changes","id":"s","cursor":"1.e.2","entries":[{"op":"upsert","key":"k","row":{"a":1,"b":[true,null,"x\"y"],"c":{"d":-1.5e3}}},{"op":"delete","key":"j","origin":"o"}]}`,
		`{"v":1,"type":"changes","cursor":"1.e.2","more":true,"entries":[]}`,
		`{"v":1,"type":"changes","id":"s","cursor":"1.e.2","entries":[{"op":"upsert","key":"k","row":{"a": 1, "t": "2026-11-30T15:04:05.123456Z"},"resource":"r"}]}`,
		`{"v":1,"type":"changes","id":"s","cursor":"1.e.2","entries":[{"op":"upsert","key":"k","row":null}]}`,
		`{"v":1,"type":"changes","id":"\u00e9","cursor":"c","entries":[]}`,
		`{"v":1,"type":"changes","id":"s","cursor":"c","entries":[{"op":"upsert","key":"k","row":{"a":01}}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fast, ok := decodeChangesFast(data)
		if !ok {
			return
		}
		var slow ServerFrame
		if err := json.Unmarshal(data, &slow); err != nil {
			t.Fatalf("fast path accepted %q, encoding/json refuses it: %v", data, err)
		}
		a, _ := json.Marshal(fast)
		b, _ := json.Marshal(slow)
		if string(a) != string(b) {
			t.Fatalf("%q:\nfast %s\nslow %s", data, a, b)
		}
	})
}

func BenchmarkDecodeServerFrame(b *testing.B) {
	var entries []byte
	for i := 0; i < 1000; i++ {
		if i > 0 {
			entries = append(entries, ',')
		}
		entries = AppendEntry(entries, "upsert", fmt.Sprintf("k%d", i), json.RawMessage(fmt.Sprintf(`{"id":"k%d","tenant":"t1","grp":2,"title":"a title of a typical length %d","n":%d}`, i, i, i)), "")
	}
	frame := AppendChangesEnd(append(AppendChangesStart(nil, jsontext.AppendString(nil, "s1"), "1.e.5"), entries...))
	b.Run("fast", func(b *testing.B) {
		b.SetBytes(int64(len(frame)))
		for b.Loop() {
			if _, err := DecodeServerFrame(frame); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(frame)))
		for b.Loop() {
			var f ServerFrame
			if err := json.Unmarshal(frame, &f); err != nil {
				b.Fatal(err)
			}
		}
	})
}
