package core

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
)

// A snapshot cursor says where a snapshot stands within its scope: after
// the key of the last row read, hidden rows of a row filter included. That
// key is sealed (AES-256-GCM, with a random nonce) under the key of the
// feed (feed.CursorKeyer), so a cursor reveals only positions of the change
// log. Its additional data binds the sealed place to the principal's ID,
// the subscription's scopes, the epoch, the position and the cursor's
// number: a cursor opens only for the principal and the scopes it was
// handed out for, and one of another principal, scope or change log is
// refused as invalid_cursor, whatever its bytes.

// cursorSealer seals and opens the places of snapshot cursors.
type cursorSealer struct {
	aead cipher.AEAD
}

// cursorNonceSize is the length of the random nonce a sealed place starts
// with.
const cursorNonceSize = 12

// maxSnapshotAfter bounds the opened place of a snapshot cursor: a cursor
// string is at most protocol.MaxCursorLen bytes, so nothing longer was ever
// handed out in one that can come back.
const maxSnapshotAfter = protocol.MaxCursorLen

// newCursorSealer returns a sealer for a feed.CursorKeySize-byte key.
func newCursorSealer(key []byte) (*cursorSealer, error) {
	if len(key) != feed.CursorKeySize {
		return nil, fmt.Errorf("tide: the feed's cursor key has %d bytes, want %d", len(key), feed.CursorKeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCMWithNonceSize(block, cursorNonceSize)
	if err != nil {
		return nil, err
	}
	return &cursorSealer{aead: aead}, nil
}

// randomCursorSealer returns a sealer with a random key of this process,
// for feeds that offer none.
func randomCursorSealer() *cursorSealer {
	key := make([]byte, feed.CursorKeySize)
	rand.Read(key) // never returns an error (crypto/rand, Go 1.24+)
	s, err := newCursorSealer(key)
	if err != nil {
		panic(err) // a 32-byte key is always valid
	}
	return s
}

// cursorAD is the additional data of a sealed place: everything a cursor
// is valid for, each field length-prefixed so no two differ only in where
// one field ends.
func cursorAD(b []byte, principal, scopes, epoch string, pos feed.Position, seq uint64) []byte {
	b = append(b, "tide snapshot cursor 2"...)
	for _, f := range [...]string{principal, scopes, epoch} {
		b = binary.AppendUvarint(b, uint64(len(f)))
		b = append(b, f...)
	}
	b = binary.BigEndian.AppendUint64(b, uint64(pos))
	return binary.BigEndian.AppendUint64(b, seq)
}

// snapshotCursor returns the snapshot cursor of a snapshot of ts, for p,
// that started at pos and stands after the place after (a key, or for a
// subscription of several resources multiAfter's encoding); seq numbers
// it among the snapshot's cursors.
func (e *Engine) snapshotCursor(p authz.Principal, ts targets, pos feed.Position, seq uint64, after string) string {
	var ad [256]byte
	sealed := make([]byte, cursorNonceSize, cursorNonceSize+len(after)+e.sealer.aead.Overhead())
	rand.Read(sealed) // the nonce; never returns an error (crypto/rand, Go 1.24+)
	sealed = e.sealer.aead.Seal(sealed, sealed, []byte(after), cursorAD(ad[:0], p.ID, ts.key(), e.epoch, pos, seq))
	return protocol.Cursor{Epoch: e.epoch, Pos: uint64(pos), Snapshot: true, Seq: seq, Sealed: string(sealed)}.String()
}

// errForeignCursor refuses a snapshot cursor that does not open: forged,
// altered, or handed out to another principal, for other scopes or by a
// node of another change log.
var errForeignCursor = protocol.Errorf(protocol.CodeInvalidCursor, "the cursor is not one this server issued for this subscription")

// openSnapshot opens the place of snapshot cursor cur, of this engine's
// epoch, for p and ts, and checks it: a key the feed can read (valid UTF-8,
// no NUL, not too long) and, for a subscription of several resources, one
// of its resources.
func (e *Engine) openSnapshot(p authz.Principal, ts targets, cur protocol.Cursor) (string, *protocol.Error) {
	sealed := []byte(cur.Sealed)
	if len(sealed) < cursorNonceSize+e.sealer.aead.Overhead() {
		return "", errForeignCursor
	}
	var ad [256]byte
	plain, err := e.sealer.aead.Open(nil, sealed[:cursorNonceSize], sealed[cursorNonceSize:], cursorAD(ad[:0], p.ID, ts.key(), cur.Epoch, feed.Position(cur.Pos), cur.Seq))
	if err != nil {
		return "", errForeignCursor
	}
	after := string(plain)
	if !validSnapshotAfter(ts, after) {
		return "", errForeignCursor
	}
	return after, nil
}

// validSnapshotAfter reports whether after is a place a snapshot of ts can
// continue from: for one resource a key of at most maxSnapshotAfter bytes
// of valid UTF-8 without NUL (a Postgres text value), for several one of
// their resources, then optionally a NUL and such a key.
func validSnapshotAfter(ts targets, after string) bool {
	if len(after) > maxSnapshotAfter || !utf8.ValidString(after) {
		return false
	}
	if ts.multi() {
		_, key, _, ok := parseMultiAfter(ts, after)
		return ok && !strings.Contains(key, "\x00")
	}
	return !strings.Contains(after, "\x00")
}

// cursorSealer returns the sealer of the feed's cursor key, or of a random
// key of this process if the feed offers none.
func (e *Engine) cursorSealer(ctx context.Context) (*cursorSealer, error) {
	keyer, ok := e.feed.(feed.CursorKeyer)
	if !ok {
		return randomCursorSealer(), nil
	}
	key, err := keyer.CursorKey(ctx)
	if err != nil {
		return nil, err
	}
	return newCursorSealer(key)
}
