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

// FileStore is a CursorStore kept in one JSON file, so cursors survive a
// restart of the process. Every Save and Delete rewrites the whole file
// atomically: the new content goes to a temporary file in the same
// directory, which is synced, renamed over the old file, and the directory
// synced; a crash leaves either the old or the new file, never a torn one.
//
// A FileStore is safe for concurrent use within a process. Two processes
// (or two FileStores) must not share one file. It suits the tens or
// hundreds of scopes of an app, not millions: each write costs a file
// rewrite and an fsync.
type FileStore struct {
	path string

	mu   sync.Mutex // serializes writes so the file always holds the latest records
	recs map[string]Record
}

// fileFormat is the file's content.
type fileFormat struct {
	Version int      `json:"version"`
	Records []Record `json:"records"`
}

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
	var f fileFormat
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("client: cursor store %s is corrupt: %v", path, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("client: cursor store %s is corrupt: data after the JSON object", path)
	}
	if f.Version != fileFormatVersion {
		return nil, fmt.Errorf("client: cursor store %s has format version %d; this client reads %d", path, f.Version, fileFormatVersion)
	}
	for i, r := range f.Records {
		if r.Digest == "" {
			return nil, fmt.Errorf("client: cursor store %s is corrupt: record %d has no digest", path, i)
		}
		if _, dup := s.recs[r.Digest]; dup {
			return nil, fmt.Errorf("client: cursor store %s is corrupt: two records for digest %s", path, r.Digest)
		}
		if len(r.Conditions) > 0 {
			// The file is indented; hand conditions back in the compact
			// form they were saved in.
			var b bytes.Buffer
			if err := json.Compact(&b, r.Conditions); err != nil {
				return nil, fmt.Errorf("client: cursor store %s is corrupt: record %d: %v", path, i, err)
			}
			r.Conditions = b.Bytes()
		}
		s.recs[r.Digest] = r
	}
	return s, nil
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
	if err := s.write(next); err != nil {
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
	if err := s.write(next); err != nil {
		return err
	}
	s.recs = next
	return nil
}

// write replaces the file with recs: temp file, fsync, rename, fsync of
// the directory. The caller holds s.mu.
func (s *FileStore) write(recs map[string]Record) (err error) {
	f := fileFormat{Version: fileFormatVersion, Records: make([]Record, 0, len(recs))}
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
