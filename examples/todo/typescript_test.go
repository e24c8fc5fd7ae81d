package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestTypeScriptCommitted checks that web/tide.gen.ts is what the demo's
// declarations generate: a Go change without go generate fails here.
func TestTypeScriptCommitted(t *testing.T) {
	var got bytes.Buffer
	if err := writeTypeScript(context.Background(), &got); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("web", "tide.gen.ts")
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("examples/todo/%s is not what the Go declarations generate; regenerate it with: %s\n--- generated:\n%s", path, generateCommand, got.Bytes())
	}
}
