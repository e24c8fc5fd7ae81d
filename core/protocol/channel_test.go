package protocol

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestChannelClientFrames(t *testing.T) {
	long := strings.Repeat("t", MaxTopicLen+1)
	for _, tc := range []struct {
		frame string
		code  Code // "" accepted
	}{
		{`{"v":1,"type":"topic-subscribe","topic":"board:b1"}`, ""},
		{`{"v":1,"type":"topic-subscribe","topic":"board:b1","state":{"x":1}}`, ""},
		{`{"v":1,"type":"topic-subscribe"}`, CodeBadFrame},
		{`{"v":1,"type":"topic-subscribe","topic":"` + long + `"}`, CodeBadFrame},
		{`{"v":1,"type":"topic-subscribe","topic":"a\u0001"}`, CodeBadFrame},
		{`{"v":1,"type":"topic-subscribe","topic":"a","state":"` + strings.Repeat("s", MaxStateBytes) + `"}`, CodeMessageTooLarge},
		{`{"v":1,"type":"topic-unsubscribe","topic":"board:b1"}`, ""},
		{`{"v":1,"type":"publish","topic":"board:b1","data":{"x":1}}`, ""},
		{`{"v":1,"type":"publish","topic":"board:b1","data":0}`, ""},
		{`{"v":1,"type":"publish","topic":"board:b1"}`, CodeBadFrame},
		{`{"v":1,"type":"publish","topic":"board:b1","data":"` + strings.Repeat("d", MaxDataBytes) + `"}`, CodeMessageTooLarge},
		{`{"v":1,"type":"presence-update","topic":"board:b1","state":null}`, ""},
		{`{"v":1,"type":"presence-update","topic":"board:b1"}`, CodeBadFrame},
		{`{"v":1,"type":"publish","topic":5,"data":1}`, CodeBadFrame},
	} {
		_, err := DecodeClientFrame([]byte(tc.frame))
		switch {
		case tc.code == "" && err != nil:
			t.Errorf("%.80s: refused: %v", tc.frame, err)
		case tc.code != "" && (err == nil || err.Code != tc.code):
			t.Errorf("%.80s: got %v, want %s", tc.frame, err, tc.code)
		}
	}
}

func TestChannelServerFramesRoundTrip(t *testing.T) {
	ms := []Member{{ID: "n.1", Principal: "al\"ice", State: json.RawMessage(`{"x":1}`)}, {ID: "n.2", Principal: ""}}
	for _, tc := range []struct {
		frame []byte
		want  ServerFrame
	}{
		{TopicSubscribed("board:b1", true), ServerFrame{Type: FrameTopicSubscribed, ChannelServerFields: ChannelServerFields{Topic: "board:b1", Presence: true}}},
		{TopicSubscribed("chat:\u2028", false), ServerFrame{Type: FrameTopicSubscribed, ChannelServerFields: ChannelServerFields{Topic: "chat:\u2028"}}},
		{Message("board:b1", json.RawMessage(`[1,2]`), "bob"), ServerFrame{Type: FrameMessage, ChannelServerFields: ChannelServerFields{Topic: "board:b1", Data: json.RawMessage(`[1,2]`), From: "bob"}}},
		{Presence("board:b1", ms), ServerFrame{Type: FramePresence, ChannelServerFields: ChannelServerFields{Topic: "board:b1", Members: ms}}},
		{Presence("board:b1", nil), ServerFrame{Type: FramePresence, ChannelServerFields: ChannelServerFields{Topic: "board:b1", Members: []Member{}}}},
		{PresenceDiff("board:b1", ms[:1], ms[1:]), ServerFrame{Type: FramePresenceDiff, ChannelServerFields: ChannelServerFields{Topic: "board:b1", Joins: ms[:1], Leaves: ms[1:]}}},
		{TopicError("board:b1", Errorf(CodeForbidden, "no")), ServerFrame{Type: FrameError, Code: CodeForbidden, Message: "no", ChannelServerFields: ChannelServerFields{Topic: "board:b1"}}},
	} {
		got, err := DecodeServerFrame(tc.frame)
		if err != nil {
			t.Fatalf("%s: %v", tc.frame, err)
		}
		tc.want.V = Version
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.frame, got, tc.want)
		}
	}
	w, err := DecodeServerFrame(Welcome("b", "", 0, Limits{MaxFrameBytes: 1, ChannelLimits: ChannelLimits{MaxTopics: 3, PublishRate: 2}}))
	if err != nil || w.Limits.MaxTopics != 3 || w.Limits.PublishRate != 2 || w.Limits.MaxPresence != 0 {
		t.Fatalf("welcome: %+v, %v", w.Limits, err)
	}
}

// FuzzDecodeChannelFrame checks that channel client frames are accepted
// only with their required fields within limits, and that the error frame
// answering a refused one is valid JSON.
func FuzzDecodeChannelFrame(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"type":"topic-subscribe","topic":"board:b1","state":{"x":1}}`,
		`{"v":1,"type":"topic-unsubscribe","topic":"board:b1"}`,
		`{"v":1,"type":"publish","topic":"board:b1","data":{"id":"a","X":1}}`,
		`{"v":1,"type":"presence-update","topic":"board:b1","state":"typing"}`,
		`{"v":1,"type":"publish","topic":"","data":1}`,
		`{"v":1,"type":"publish","topic":"\ud800","data":  }`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fr, err := DecodeClientFrame(data)
		if err != nil {
			if err.Code == "" {
				t.Fatal("error without code")
			}
			if !json.Valid(TopicError(fr.Topic, err)) {
				t.Fatalf("error frame for %q is not valid JSON", data)
			}
			return
		}
		switch fr.Type {
		case FrameTopicSubscribe, FrameTopicUnsubscribe, FramePublish, FramePresenceUpdate:
			if fr.Topic == "" || len(fr.Topic) > MaxTopicLen || len(fr.State) > MaxStateBytes {
				t.Fatalf("accepted %s with topic %q, state %d bytes", fr.Type, fr.Topic, len(fr.State))
			}
			if fr.Type == FramePublish && (len(fr.Data) == 0 || !json.Valid(fr.Data)) {
				t.Fatalf("accepted publish with data %q", fr.Data)
			}
			if fr.Type == FramePresenceUpdate && len(fr.State) == 0 {
				t.Fatal("accepted presence-update without state")
			}
		}
	})
}

// FuzzChannelServerFrames checks that the channel encoders produce frames
// DecodeServerFrame reads back unchanged, whatever the strings.
func FuzzChannelServerFrames(f *testing.F) {
	f.Add("board:b1", "alice", "n.1", []byte(`{"x":1}`))
	f.Add("a\"b\\c\x00", "\xff", "\u2028", []byte(`"s"`))
	f.Fuzz(func(t *testing.T, topic, principal, id string, state []byte) {
		if topic == "" || id == "" || !json.Valid(state) {
			return
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, state); err != nil {
			return
		}
		st := json.RawMessage(compact.Bytes())
		m := Member{ID: id, Principal: principal, State: st}
		for _, frame := range [][]byte{Message(topic, st, principal), Presence(topic, []Member{m}), PresenceDiff(topic, []Member{m}, []Member{{ID: id}})} {
			if !json.Valid(frame) {
				t.Fatalf("invalid JSON %q", frame)
			}
			got, err := DecodeServerFrame(frame)
			if err != nil {
				t.Fatalf("%q: %v", frame, err)
			}
			var want string // invalid UTF-8 comes back as U+FFFD, byte by byte, as with encoding/json
			b, _ := json.Marshal(topic)
			_ = json.Unmarshal(b, &want)
			if got.Topic != want {
				t.Fatalf("topic %q came back %q", topic, got.Topic)
			}
		}
	})
}
