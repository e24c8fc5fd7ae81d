package pgfeed

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// The messages of Postgres's streaming replication protocol that the
// sequencer's wake-up reads (see walwake.go), and a scan of the WAL they
// carry for one relation's writes.
//
// A message is the payload of a CopyData message of the stream:
//
//	XLogData:         'w', start LSN (8), end of WAL on the server (8), send time (8), WAL bytes
//	keepalive:        'k', end of WAL on the server (8), send time (8), reply requested (1)
//	standby status:   'r', written LSN (8), flushed LSN (8), applied LSN (8), time (8), reply requested (1)
//
// Integers are big-endian; times are microseconds since 2000-01-01 UTC.

// errWALMessage reports a stream message tide cannot read.
var errWALMessage = errors.New("pgfeed: malformed WAL stream message")

// walData is an XLogData message: WAL bytes starting at LSN start.
type walData struct {
	start uint64
	wal   []byte
}

// parseWALData decodes an XLogData message ('w'). wal aliases msg.
func parseWALData(msg []byte) (walData, error) {
	if len(msg) < 25 || msg[0] != 'w' {
		return walData{}, fmt.Errorf("%w: XLogData of %d bytes", errWALMessage, len(msg))
	}
	return walData{start: binary.BigEndian.Uint64(msg[1:]), wal: msg[25:]}, nil
}

// parseKeepalive decodes a primary keepalive message ('k'): the end of the
// server's WAL and whether it asks for a status reply now.
func parseKeepalive(msg []byte) (walEnd uint64, reply bool, err error) {
	if len(msg) < 18 || msg[0] != 'k' {
		return 0, false, fmt.Errorf("%w: keepalive of %d bytes", errWALMessage, len(msg))
	}
	return binary.BigEndian.Uint64(msg[1:]), msg[17] != 0, nil
}

// pgEpoch is the origin of the protocol's timestamps.
var pgEpoch = time.Date(2000, time.January, 1, 0, 0, 0, 0, time.UTC)

// appendStandbyStatus appends a standby status update ('r') reporting lsn
// as received. The wake-up keeps no WAL, so written, flushed and applied
// are the same position: the server need keep nothing for it.
func appendStandbyStatus(b []byte, lsn uint64, now time.Time) []byte {
	b = append(b, 'r')
	for range 3 {
		b = binary.BigEndian.AppendUint64(b, lsn)
	}
	b = binary.BigEndian.AppendUint64(b, uint64(now.Sub(pgEpoch).Microseconds()))
	return append(b, 0)
}

// WAL page headers, from Postgres's access/xlog_internal.h: every page of
// the WAL (wal_block_size bytes) starts with a header, long on the first
// page of a segment.
const (
	walShortHeader = 24     // SizeOfXLogShortPHD
	walLongHeader  = 40     // SizeOfXLogLongPHD
	walLongFlag    = 0x0002 // XLP_LONG_HEADER in xlp_info, the header's third and fourth bytes
)

// walScan finds the file locator of one relation (its tablespace, database
// and file node: RelFileNode, 12 bytes in the server's byte order) in a
// stream of WAL: a record that changes one of the relation's pages names
// it in its first block reference. Page headers are skipped and chunks
// joined, so a locator split by a page or message boundary is found too.
// Stray matches are harmless (a look that finds nothing); the sequencer
// still looks at its poll interval, should one be missed.
type walScan struct {
	pattern []byte // the locator
	block   uint64 // wal_block_size
	next    uint64 // LSN after the last byte fed
	skip    int    // bytes of a page header still to skip at next
	head    []byte // the first bytes of the page header at next, until its flags are known
	inHead  bool   // next is within the first four bytes of a page header
	tail    []byte // the last len(pattern)-1 bytes of WAL content before next
	content []byte // scratch
}

// newWALScan returns a scan for the relation at (tablespace, database,
// filenode), in a WAL of pages of block bytes (wal_block_size, a power of
// two of at least walLongHeader bytes).
func newWALScan(tablespace, database, filenode uint32, block uint64) *walScan {
	p := binary.LittleEndian.AppendUint32(nil, tablespace)
	p = binary.LittleEndian.AppendUint32(p, database)
	p = binary.LittleEndian.AppendUint32(p, filenode)
	return &walScan{pattern: p, block: block}
}

// feed scans the WAL bytes wal, which start at LSN start, and reports
// whether the relation's locator occurs in them or straddles them and the
// bytes fed before (when those ended at start).
func (s *walScan) feed(start uint64, wal []byte) bool {
	if start != s.next {
		s.tail, s.skip, s.inHead = s.tail[:0], 0, false // a gap: nothing joins
		if off := start % s.block; off != 0 && off < walLongHeader {
			// Inside what may be a page header: skip to the end of the
			// short one (a stream starts at a record boundary, past it).
			s.skip = int(max(0, walShortHeader-int64(off)))
		}
	}
	c := append(s.content[:0], s.tail...)
	lsn, i := start, 0
	for i < len(wal) {
		if s.skip > 0 {
			n := min(s.skip, len(wal)-i)
			i, lsn, s.skip = i+n, lsn+uint64(n), s.skip-n
			continue
		}
		if s.inHead {
			// The header's length is in its flags, its third and fourth
			// bytes, which may arrive in the next message.
			n := min(4-len(s.head), len(wal)-i)
			s.head = append(s.head, wal[i:i+n]...)
			i, lsn = i+n, lsn+uint64(n)
			if len(s.head) == 4 {
				s.skip = walShortHeader - 4
				if binary.LittleEndian.Uint16(s.head[2:])&walLongFlag != 0 {
					s.skip = walLongHeader - 4
				}
				s.inHead = false
			}
			continue
		}
		if lsn%s.block == 0 {
			s.inHead, s.head = true, s.head[:0]
			continue
		}
		end := i + int(min(uint64(len(wal)-i), s.block-lsn%s.block))
		c = append(c, wal[i:end]...)
		lsn, i = lsn+uint64(end-i), end
	}
	s.next = lsn
	found := bytes.Contains(c, s.pattern)
	keep := min(len(c), len(s.pattern)-1)
	s.tail = append(s.tail[:0], c[len(c)-keep:]...)
	s.content = c[:0]
	return found
}
