package core

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core/protocol"
)

// BenchmarkSnapshotCursor seals a snapshot cursor, as every snapshot page
// sent does, and parses and opens it, as a resumed snapshot does, for a
// short key and a long one.
func BenchmarkSnapshotCursor(b *testing.B) {
	e := sealingEngine(b)
	ts, _ := cursorTargets()
	p := authz.Principal{ID: "user-1234"}
	for _, key := range []string{"0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", strings.Repeat("k", 600)} {
		b.Run(fmt.Sprint("key=", len(key), "B"), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s := e.snapshotCursor(p, ts, 123456, 7, key)
				cur, err := protocol.ParseCursor(s)
				if err != nil {
					b.Fatal(err)
				}
				if after, perr := e.openSnapshot(p, ts, cur); perr != nil || after != key {
					b.Fatal(perr)
				}
			}
		})
	}
}
