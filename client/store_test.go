package client

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
)

func rec(digest, cursor string) Record {
	return Record{Digest: digest, Resource: "todos", Conditions: json.RawMessage(`{"p":"x"}`), State: StateLive, Cursor: cursor}
}

// storeContract runs the behaviour every CursorStore must have.
func storeContract(t *testing.T, s CursorStore) {
	ctx := context.Background()
	if _, ok, err := s.Load(ctx, "a"); err != nil || ok {
		t.Fatalf("Load of a missing record = %v, %v", ok, err)
	}
	if err := s.Save(ctx, Record{}); err == nil {
		t.Error("Save of a record without a digest succeeded")
	}
	want := rec("a", "1.E.1")
	if err := s.Save(ctx, want); err != nil {
		t.Fatal(err)
	}
	got, ok, err := s.Load(ctx, "a")
	if err != nil || !ok || !reflect.DeepEqual(got, want) {
		t.Fatalf("Load = %+v, %v, %v; want %+v", got, ok, err, want)
	}
	// The store keeps its own copy.
	got.Conditions[0] = 'X'
	if again, _, _ := s.Load(ctx, "a"); string(again.Conditions) != `{"p":"x"}` {
		t.Errorf("mutating a loaded record changed the store: %s", again.Conditions)
	}
	want.Cursor = "1.E.2"
	if err := s.Save(ctx, want); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := s.Load(ctx, "a"); got.Cursor != "1.E.2" {
		t.Errorf("Save did not replace: cursor %q", got.Cursor)
	}
	if err := s.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Load(ctx, "a"); ok {
		t.Error("record still there after Delete")
	}
	if err := s.Delete(ctx, "a"); err != nil {
		t.Errorf("Delete of a missing record: %v", err)
	}

	// Concurrent use.
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := fmt.Sprintf("d%02d", i)
			if err := s.Save(ctx, rec(d, "c")); err != nil {
				t.Error(err)
			}
			if _, ok, err := s.Load(ctx, d); !ok || err != nil {
				t.Errorf("Load %s after Save: %v %v", d, ok, err)
			}
		}()
	}
	wg.Wait()
}

func TestMemoryStore(t *testing.T) {
	storeContract(t, NewMemoryStore())
	var zero MemoryStore // the zero value works too
	if err := zero.Save(context.Background(), rec("z", "")); err != nil {
		t.Fatal(err)
	}
}

func TestFileStoreContract(t *testing.T) {
	s, err := NewFileStore(filepath.Join(t.TempDir(), "cursors.json"))
	if err != nil {
		t.Fatal(err)
	}
	storeContract(t, s)
}

func TestFileStorePersistsAcrossReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "cursors.json")
	s, err := NewFileStore(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("opening a store created the file (stat: %v)", err)
	}
	for _, r := range []Record{rec("a", "1.E.5"), rec("b", "1s.E.3.YQ"), rec("c", "")} {
		if err := s.Save(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Delete(ctx, "b"); err != nil {
		t.Fatal(err)
	}

	s2, err := NewFileStore(path)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	for _, want := range []Record{rec("a", "1.E.5"), rec("c", "")} {
		got, ok, err := s2.Load(ctx, want.Digest)
		if err != nil || !ok || !reflect.DeepEqual(got, want) {
			t.Errorf("after reopen Load(%s) = %+v, %v, %v; want %+v", want.Digest, got, ok, err, want)
		}
	}
	if _, ok, _ := s2.Load(ctx, "b"); ok {
		t.Error("a deleted record came back after reopen")
	}
}

func TestFileStoreReplacesAtomically(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "cursors.json")
	s, err := NewFileStore(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Save(ctx, rec("a", "1.E.1")); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// A reader that opened the file before a write keeps seeing the old,
	// complete content: the file is replaced, never rewritten in place.
	old, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if err := s.Save(ctx, rec("b", strings.Repeat("9", 900))); err != nil {
		t.Fatal(err)
	}
	oldContent, err := os.ReadFile(old.Name()) // by name: the new file
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(before)+1024)
	n, _ := old.Read(buf) // through the old descriptor: the old file
	if string(buf[:n]) != string(before) {
		t.Errorf("the old file was modified in place:\nbefore: %s\nnow:    %s", before, buf[:n])
	}
	if string(oldContent) == string(before) {
		t.Error("the file at the path was not replaced")
	}
	// No temporary files are left behind.
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "cursors.json" {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("directory holds %v, want only cursors.json", names)
	}
}

func TestFileStoreFailedWriteChangesNothing(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "sub")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := NewFileStore(filepath.Join(dir, "cursors.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Save(ctx, rec("a", "1.E.1")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil { // every later write fails
		t.Fatal(err)
	}
	if err := s.Save(ctx, rec("a", "1.E.2")); err == nil {
		t.Fatal("Save succeeded without a directory to write to")
	}
	if err := s.Delete(ctx, "a"); err == nil {
		t.Fatal("Delete succeeded without a directory to write to")
	}
	got, ok, err := s.Load(ctx, "a")
	if err != nil || !ok || got.Cursor != "1.E.1" {
		t.Errorf("after failed writes Load = %+v, %v, %v; want the last durable record", got, ok, err)
	}
}

func TestFileStoreCorruptFile(t *testing.T) {
	cases := map[string]string{
		"not json":           "garbage",
		"empty file":         "",
		"truncated":          `{"version":1,"records":[{"digest":"a","cursor":"1.E.1"`,
		"wrong version":      `{"version":2,"records":[]}`,
		"no version":         `{"records":[]}`,
		"record sans digest": `{"version":1,"records":[{"cursor":"1.E.1"}]}`,
		"duplicate digest":   `{"version":1,"records":[{"digest":"a"},{"digest":"a"}]}`,
		"trailing data":      `{"version":1,"records":[]} {}`,
		"wrong types":        `{"version":1,"records":[{"digest":1}]}`,
		"an array":           `[]`,
	}
	for name, content := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cursors.json")
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := NewFileStore(path)
			if err == nil {
				t.Fatalf("NewFileStore accepted %q", content)
			}
			if s != nil {
				t.Error("NewFileStore returned a store with its error")
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name the file", err)
			}
			// The corrupt file is left for the user to inspect.
			if data, _ := os.ReadFile(path); string(data) != content {
				t.Error("the corrupt file was modified")
			}
		})
	}
	if _, err := NewFileStore(""); err == nil {
		t.Error("NewFileStore accepted an empty path")
	}
}

func TestStoresKeepTheirMeta(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "store.json")
	fs, err := NewFileStore(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []MetaStore{NewMemoryStore(), fs} {
		if m, err := s.LoadMeta(ctx); err != nil || m != (Meta{}) {
			t.Fatalf("%T: a new store's meta = %+v, %v", s, m, err)
		}
		want := Meta{Origin: "go-X", Principal: "u1", Bound: true, MaxFrameBytes: 4096}
		if err := s.SaveMeta(ctx, want); err != nil {
			t.Fatal(err)
		}
		if m, err := s.LoadMeta(ctx); err != nil || m != want {
			t.Errorf("%T: meta = %+v, %v; want %+v", s, m, err, want)
		}
	}
	again, err := NewFileStore(path)
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := again.LoadMeta(ctx); m.Origin != "go-X" || m.Principal != "u1" || !m.Bound || m.MaxFrameBytes != 4096 {
		t.Errorf("meta after reopen: %+v", m)
	}
}

// A store file written before the meta existed is read as it was, and the
// first Client on it gives it an origin that every later Client reuses.
func TestStoreFileBeforeMetaGetsAnOrigin(t *testing.T) {
	old, err := os.ReadFile(filepath.Join("testdata", "store", "before-meta.json"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "store.json")
	if err := os.WriteFile(path, old, 0o600); err != nil {
		t.Fatal(err)
	}
	open := func() (*Client, *FileStore) {
		fs, err := NewFileStore(path)
		if err != nil {
			t.Fatalf("an older store file is refused: %v", err)
		}
		c, err := New(Config{URL: "ws://127.0.0.1:1/tide/ws", Store: fs})
		if err != nil {
			t.Fatal(err)
		}
		return c, fs
	}
	c1, fs1 := open()
	if p := c1.Pending(); len(p) != 1 || p[0].Key() != "k3" {
		t.Errorf("the older file's queue: %v", keysOfPending(p))
	}
	if m, _ := fs1.LoadMeta(context.Background()); m.Origin == "" || m.Origin != c1.Origin() || m.Bound {
		t.Errorf("meta saved by the first client: %+v (origin %q)", m, c1.Origin())
	}
	c2, _ := open()
	if c2.Origin() != c1.Origin() {
		t.Errorf("origins %q then %q: a store keeps its origin", c1.Origin(), c2.Origin())
	}
	rec, ok, err := fs1.Load(context.Background(), "2924a547c6a4a00032e4e12c6c1a2f6fedef86866f9e32b36280100c32c5e453")
	if err != nil || !ok || rec.Rows["t1"] == nil || rec.Cursor != "1.EpochA.7" {
		t.Errorf("the older file's record: %+v, %v, %v", rec, ok, err)
	}
}
