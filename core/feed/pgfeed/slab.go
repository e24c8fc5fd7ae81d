package pgfeed

import "unsafe"

// slab hands out byte runs and strings from large chunks, so decoding a page
// of changes costs a few allocations instead of several per change. A chunk
// is never written again once a run of it is handed out (a full chunk is
// replaced, not grown), which is what makes the strings safe: each is
// immutable for as long as anything refers to it.
type slab struct {
	chunk []byte
	strs  []string
}

const slabChunk = 64 << 10

// bytes returns a copy of b in the slab, capped so appending to it cannot
// reach the next run.
func (s *slab) bytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	if len(b) > slabChunk/4 {
		return append([]byte(nil), b...)
	}
	if cap(s.chunk)-len(s.chunk) < len(b) {
		s.chunk = make([]byte, 0, slabChunk)
	}
	start := len(s.chunk)
	s.chunk = append(s.chunk, b...)
	return s.chunk[start:len(s.chunk):len(s.chunk)]
}

// compactJSON returns compactJSON of b in the slab, capped like bytes.
func (s *slab) compactJSON(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	if len(b) > slabChunk/4 {
		return compactJSON(nil, b)
	}
	if cap(s.chunk)-len(s.chunk) < len(b) {
		s.chunk = make([]byte, 0, slabChunk)
	}
	start := len(s.chunk)
	s.chunk = compactJSON(s.chunk, b) // within capacity: never longer than b
	return s.chunk[start:len(s.chunk):len(s.chunk)]
}

// free returns the chunk's free space as an empty slice to append to, with
// room for at least n bytes (in a new chunk when the current one has less):
// what is appended to it is kept by keep, rendered in place instead of
// rendered elsewhere and copied.
func (s *slab) free(n int) []byte {
	if cap(s.chunk)-len(s.chunk) < max(n, 1) {
		s.chunk = make([]byte, 0, max(slabChunk, n))
	}
	return s.chunk[len(s.chunk):len(s.chunk)]
}

// keep returns b, which was appended to the slice free returned last, in
// the slab, capped like bytes: in place when it fit, copied as bytes would
// when it outgrew the free space (the append moved it).
func (s *slab) keep(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	start := len(s.chunk)
	if start < cap(s.chunk) && unsafe.SliceData(b) == unsafe.SliceData(s.chunk[start:cap(s.chunk)]) {
		s.chunk = s.chunk[:start+len(b)]
		return s.chunk[start:len(s.chunk):len(s.chunk)]
	}
	return s.bytes(b)
}

// string returns b as a string backed by the slab.
func (s *slab) string(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	c := s.bytes(b)
	return unsafe.String(&c[0], len(c))
}

// strings returns a slice of n strings from the slab's string chunk.
func (s *slab) strings(n int) []string {
	if n > 256 {
		return make([]string, n)
	}
	if cap(s.strs)-len(s.strs) < n {
		s.strs = make([]string, 0, 1024)
	}
	start := len(s.strs)
	s.strs = s.strs[:start+n]
	return s.strs[start : start+n : start+n]
}
