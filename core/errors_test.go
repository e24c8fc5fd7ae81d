package core

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core/protocol"
)

// TestRejectWords: what a reject says to a person for each kind of
// refusal.
func TestRejectWords(t *testing.T) {
	type cardArgs struct {
		ID   string `json:"id"`
		Tags []int  `json:"tags"`
	}
	decodeErr := func(s string) error {
		var a cardArgs
		return json.Unmarshal([]byte(s), &a)
	}
	long := strings.Repeat("é", maxAppWords) // 2 bytes each: cut inside would break a character
	for _, tt := range []struct {
		name string
		got  string
		want string
	}{
		{"the mutator's words", appWords(fmt.Errorf("%w: title must be 1-200 characters (got 0)", ErrInvalidArgs), ErrInvalidArgs), "title must be 1-200 characters (got 0)"},
		{"words wrapped again", appWords(fmt.Errorf("cards.add: %w", fmt.Errorf("%w: taken", ErrConflict)), ErrConflict), "taken"},
		{"no words", appWords(ErrConflict, ErrConflict), ""},
		{"the sentinel wrapped last", appWords(fmt.Errorf("validating: %w", ErrInvalidArgs), ErrInvalidArgs), ""},
		{"long words are cut on a character", appWords(fmt.Errorf("%w: %s", ErrInvalidArgs, long), ErrInvalidArgs), long[:maxAppWords] + "…"},
		{"args of the wrong type", argsMessage(decodeErr(`{"id":7}`)), "id must be a string"},
		{"args in an array", argsMessage(decodeErr(`{"tags":[1.5]}`)), "tags must be a whole number"},
		{"args not JSON", argsMessage(decodeErr(`{"id":`)), "the arguments must be valid JSON"},
		{"args refused by their own UnmarshalJSON with words", argsMessage(fmt.Errorf("%w: id is not a card id", ErrInvalidArgs)), "id is not a card id"},
		{"args refused by their own UnmarshalJSON", argsMessage(errors.New("card: bad id")), "the change is not valid"},
		{"mutator conflict", mutatorRefusal(protocol.CodeConflict, ErrConflict, fmt.Errorf("%w: the title is taken", ErrConflict), "cards", "add").Message, "the title is taken"},
		{"mutator conflict, detail", mutatorRefusal(protocol.CodeConflict, ErrConflict, fmt.Errorf("%w: the title is taken", ErrConflict), "cards", "add").Detail, "cards.add: tide: conflict: the title is taken"},
		{"bare conflict", mutatorRefusal(protocol.CodeConflict, ErrConflict, ErrConflict, "cards", "add").Message, "the change conflicts with the current data"},
		{"forbidden", presentReject(protocol.Errorf(protocol.CodeForbidden, "cards.add: %v", authz.ErrForbidden)).Message, "you do not have access to this"},
		{"forbidden, detail", presentReject(protocol.Errorf(protocol.CodeForbidden, "cards.add: %v", authz.ErrForbidden)).Detail, "cards.add: authz: forbidden"},
		{"presented already", presentReject(presentedf(protocol.CodeInvalidArgs, "id must be a string", "d")).Message, "id must be a string"},
		{"draining", presentReject(ErrDraining).Message, "the server is restarting; try again"},
		{"draining, detail", presentReject(ErrDraining).Detail, ErrDraining.Message},
	} {
		if tt.got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, tt.got, tt.want)
		}
	}
	if !utf8.ValidString(appWords(fmt.Errorf("%w: %s", ErrInvalidArgs, long), ErrInvalidArgs)) {
		t.Error("cut inside a character")
	}
	if ErrDraining.Detail != "" || ErrDraining.Message != "the server is shutting down" {
		t.Errorf("presentReject changed the shared ErrDraining: %+v", ErrDraining)
	}
}

// TestRejectMessages: every code has a short message fit for a person:
// no code name, no package prefix, no Go.
func TestRejectMessages(t *testing.T) {
	for _, code := range []protocol.Code{
		protocol.CodeBadFrame, protocol.CodeUnsupportedVersion, protocol.CodeUnknownType, protocol.CodeHelloRequired,
		protocol.CodeUnknownResource, protocol.CodeInvalidConditions, protocol.CodeInvalidCursor, protocol.CodeDuplicateSub,
		protocol.CodeUnknownSub, protocol.CodeUnauthenticated, protocol.CodeForbidden, protocol.CodeTooManySubscriptions,
		protocol.CodeTooManyConditions, protocol.CodeFrameTooLarge, protocol.CodeRateLimited, protocol.CodeDraining,
		protocol.CodeUnavailable, protocol.CodeInternal, protocol.CodeNotMigrated, protocol.CodeNotCaptured,
		protocol.CodeUnknownMutator, protocol.CodeInvalidArgs, protocol.CodeConflict, protocol.CodeMutatorFailed, protocol.CodeKeyExpired,
	} {
		m := rejectMessage(code)
		if m == "" || len(m) > 80 || strings.Contains(m, "_") || strings.Contains(m, ":") || strings.Contains(m, "Go") {
			t.Errorf("%s: %q", code, m)
		}
	}
	if m := rejectMessage("some_new_code"); m != "the change could not be saved" {
		t.Errorf("an unknown code: %q", m)
	}
}
