package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
)

// FileStore is a CursorStore and QueueStore kept in one JSON file, so
// cursors, the local copies of synced scopes and the offline queue survive a
// restart of the process. A synced scope's rows and cursor are one Record,
// written in one Save. Every Save and Delete rewrites the whole file
// atomically: the new content goes to a temporary file in the same
// directory, which is synced, renamed over the old file, and the directory
// synced; a crash leaves either the old or the new file, never a torn one.
//
// A FileStore is safe for concurrent use within a process. Two processes
// (or two FileStores) must not share one file. It suits the tens or
// hundreds of scopes of an app, with copies of thousands of rows, not
// millions: each write costs a rewrite of the whole file and an fsync.
type FileStore struct {
	path string

	mu    sync.Mutex // serializes writes so the file always holds the latest records
	recs  map[string]Record
	queue Queue
	meta  Meta
}

// fileFormat is the file's content (docs: client/doc.go, "Store file").
type fileFormat struct {
	Version int      `json:"version"`
	Records []Record `json:"records"`
	Queue   *Queue   `json:"queue,omitempty"`
	Meta    *Meta    `json:"meta,omitempty"`
}

// fileFormatVersion is the file's format. The rows, copy, queue and meta
// fields were added to version 1 compatibly: a file without them is a store
// of cursors only, and a file without meta gets its origin from the first
// Client that opens it.
const fileFormatVersion = 1

// NewFileStore opens the store in the file at path, creating nothing until
// the first Save: a missing file is an empty store. A file that exists but
// does not hold a store (corrupt, truncated, another format) is an error,
// never silently replaced.
func NewFileStore(path string) (*FileStore, error) {
	if path == "" {
		return nil, errors.New("client: NewFileStore: empty path")
	}
	s := &FileStore{path: path, recs: map[string]Record{}}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("client: open cursor store: %w", err)
	}
	recs, q, m, err := decodeStoreFile(data)
	if err != nil {
		return nil, fmt.Errorf("client: cursor store %s: %w", path, err)
	}
	s.recs, s.queue, s.meta = recs, q, m
	return s, nil
}

// errCorrupt wraps every reason decodeStoreFile refuses a file.
var errCorrupt = errors.New("corrupt store file")

// decodeStoreFile parses a store file. It never panics; a file that is not
// exactly one store object of a known version is an error.
func decodeStoreFile(data []byte) (map[string]Record, Queue, Meta, error) {
	var f fileFormat
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&f); err != nil {
		return nil, Queue{}, Meta{}, fmt.Errorf("%w: %v", errCorrupt, err)
	}
	if dec.More() {
		return nil, Queue{}, Meta{}, fmt.Errorf("%w: data after the JSON object", errCorrupt)
	}
	if f.Version != fileFormatVersion {
		return nil, Queue{}, Meta{}, fmt.Errorf("format version %d; this client reads %d", f.Version, fileFormatVersion)
	}
	var m Meta
	if f.Meta != nil {
		m = *f.Meta
	}
	if err := checkText("origin", m.Origin, maxOriginBytes); err != nil {
		return nil, Queue{}, Meta{}, fmt.Errorf("%w: meta: %v", errCorrupt, err)
	}
	if m.MaxFrameBytes < 0 {
		return nil, Queue{}, Meta{}, fmt.Errorf("%w: meta: negative max_frame_bytes", errCorrupt)
	}
	recs, q, err := decodeRecordsAndQueue(f)
	if err != nil {
		return nil, Queue{}, Meta{}, err
	}
	return recs, q, m, nil
}

// decodeRecordsAndQueue checks and normalizes the records and the queue of
// a decoded file.
func decodeRecordsAndQueue(f fileFormat) (map[string]Record, Queue, error) {
	recs := make(map[string]Record, len(f.Records))
	for i, r := range f.Records {
		if r.Digest == "" {
			return nil, Queue{}, fmt.Errorf("%w: record %d has no digest", errCorrupt, i)
		}
		if _, dup := recs[r.Digest]; dup {
			return nil, Queue{}, fmt.Errorf("%w: two records for digest %s", errCorrupt, r.Digest)
		}
		if len(r.Conditions) > 0 {
			// The file is indented; hand conditions back in the compact
			// form they were saved in.
			c, err := compact(r.Conditions)
			if err != nil {
				return nil, Queue{}, fmt.Errorf("%w: record %d: %v", errCorrupt, i, err)
			}
			r.Conditions = c
		}
		for k, row := range r.Rows {
			c, err := normRow(row)
			if err != nil {
				return nil, Queue{}, fmt.Errorf("%w: record %d: row %q: %v", errCorrupt, i, k, err)
			}
			r.Rows[k] = c
		}
		recs[r.Digest] = r
	}
	var q Queue
	if f.Queue != nil {
		q = *f.Queue
	}
	if q.Seq < 0 {
		return nil, Queue{}, fmt.Errorf("%w: negative queue seq", errCorrupt)
	}
	keys := map[string]bool{}
	for i := range q.Mutations {
		m := &q.Mutations[i]
		if m.Key == "" || keys[m.Key] {
			return nil, Queue{}, fmt.Errorf("%w: queued mutation %d: missing or repeated key", errCorrupt, i)
		}
		keys[m.Key] = true
		if m.Seq > q.Seq || m.Seq < 0 {
			return nil, Queue{}, fmt.Errorf("%w: queued mutation %d: seq %d outside [0, %d]", errCorrupt, i, m.Seq, q.Seq)
		}
		if len(m.Args) > 0 {
			c, err := compact(m.Args)
			if err != nil {
				return nil, Queue{}, fmt.Errorf("%w: queued mutation %d: args: %v", errCorrupt, i, err)
			}
			m.Args = c
		}
		for j := range m.Ops {
			op := &m.Ops[j]
			switch op.Op {
			case "upsert":
				c, err := normRow(op.Row)
				if err != nil {
					return nil, Queue{}, fmt.Errorf("%w: queued mutation %d: op %d: %v", errCorrupt, i, j, err)
				}
				op.Row = c
			case "delete":
				op.Row = nil
			default:
				return nil, Queue{}, fmt.Errorf("%w: queued mutation %d: op %d: %q", errCorrupt, i, j, op.Op)
			}
			if op.Resource == "" {
				return nil, Queue{}, fmt.Errorf("%w: queued mutation %d: op %d has no resource", errCorrupt, i, j)
			}
		}
	}
	return recs, q, nil
}

func compact(raw json.RawMessage) (json.RawMessage, error) {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Path returns the store's file.
func (s *FileStore) Path() string { return s.path }

// Load implements CursorStore.
func (s *FileStore) Load(_ context.Context, digest string) (Record, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.recs[digest]
	return cloneRecord(r), ok, nil
}

// List implements RecordLister.
func (s *FileStore) List(context.Context) ([]Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return listRecords(s.recs), nil
}

// Save implements CursorStore. The record is stored once the file is
// durably replaced; if writing fails, nothing changes and the error is
// returned. Writes are not interrupted by ctx.
func (s *FileStore) Save(_ context.Context, r Record) error {
	if r.Digest == "" {
		return errNoDigest
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	next := maps.Clone(s.recs)
	next[r.Digest] = cloneRecord(r)
	if err := s.write(next, s.queue, s.meta); err != nil {
		return err
	}
	s.recs = next
	return nil
}

// Delete implements CursorStore.
func (s *FileStore) Delete(_ context.Context, digest string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.recs[digest]; !ok {
		return nil
	}
	next := maps.Clone(s.recs)
	delete(next, digest)
	if err := s.write(next, s.queue, s.meta); err != nil {
		return err
	}
	s.recs = next
	return nil
}

// LoadQueue implements QueueStore.
func (s *FileStore) LoadQueue(context.Context) (Queue, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return cloneQueue(s.queue), nil
}

// SaveQueue implements QueueStore, with one atomic rewrite of the file.
func (s *FileStore) SaveQueue(_ context.Context, q Queue) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	q = cloneQueue(q)
	if err := s.write(s.recs, q, s.meta); err != nil {
		return err
	}
	s.queue = q
	return nil
}

// LoadMeta implements MetaStore.
func (s *FileStore) LoadMeta(context.Context) (Meta, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.meta, nil
}

// SaveMeta implements MetaStore, with one atomic rewrite of the file.
func (s *FileStore) SaveMeta(_ context.Context, m Meta) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.write(s.recs, s.queue, m); err != nil {
		return err
	}
	s.meta = m
	return nil
}

// write replaces the file with recs, q and m: temp file, fsync, rename,
// fsync of the directory. The caller holds s.mu.
func (s *FileStore) write(recs map[string]Record, q Queue, m Meta) (err error) {
	f := fileFormat{Version: fileFormatVersion, Records: make([]Record, 0, len(recs))}
	if q.Seq != 0 || len(q.Mutations) > 0 {
		f.Queue = &q
	}
	if m != (Meta{}) {
		f.Meta = &m
	}
	for _, d := range slices.Sorted(maps.Keys(recs)) {
		f.Records = append(f.Records, recs[d])
	}
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return fmt.Errorf("client: cursor store: %w", err)
	}
	data = append(data, '\n')
	dir, base := filepath.Split(s.path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("client: cursor store: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		return fmt.Errorf("client: cursor store: write: %w", err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("client: cursor store: sync: %w", err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("client: cursor store: close: %w", err)
	}
	if err = os.Rename(tmp.Name(), s.path); err != nil {
		return fmt.Errorf("client: cursor store: rename: %w", err)
	}
	// The rename is durable once the directory is synced. Some platforms
	// cannot sync a directory; the data itself is already safe there.
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}
