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
