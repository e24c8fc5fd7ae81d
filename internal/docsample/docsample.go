// Package docsample checks that the Go samples of a page in docs/ are the
// code a test compiles. A test file marks each sample with comment lines
// naming the page,
//
//	// writes.md begins
//	…the sample, compiled with the test…
//	// writes.md ends
//
// and calls Regions, GoBlocks, Contained or Same; a sample edited in one
// place and not the other fails the test.
package docsample

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// Regions returns the marked regions for page in the calling test's
// source file, each without the indentation of its begin line.
func Regions(t testing.TB, page string) []string {
	t.Helper()
	return regions(t, callerFile(t), page)
}

// GoBlocks returns the ```go blocks of docs/page, without their fences.
func GoBlocks(t testing.TB, page string) []string {
	t.Helper()
	return goBlocks(t, callerFile(t), page)
}

// Contained fails t unless the calling test's file has exactly one
// region for page and it is a ```go block of docs/page; the page may hold
// other Go blocks.
func Contained(t testing.TB, page string) {
	t.Helper()
	file := callerFile(t)
	rs := regions(t, file, page)
	if len(rs) != 1 {
		t.Fatalf("docsample: %d regions for %s in %s, want 1", len(rs), page, filepath.Base(file))
	}
	if !slices.Contains(goBlocks(t, file, page), rs[0]) {
		t.Fatalf("this region of %s is not a go block of docs/%s:\n%s", filepath.Base(file), page, rs[0])
	}
}

// Same fails t unless the ```go blocks of docs/page are exactly the
// regions for page of the calling test's file, and there are at least
// min of them.
func Same(t testing.TB, page string, min int) {
	t.Helper()
	file := callerFile(t)
	rs, bs := regions(t, file, page), goBlocks(t, file, page)
	if len(bs) < min {
		t.Fatalf("docsample: %d go blocks in docs/%s, want at least %d", len(bs), page, min)
	}
	for _, b := range bs {
		if !slices.Contains(rs, b) {
			t.Errorf("this go block of docs/%s is not compiled by %s:\n%s", page, filepath.Base(file), b)
		}
	}
	for _, r := range rs {
		if !slices.Contains(bs, r) {
			t.Errorf("this region of %s is not a go block of docs/%s:\n%s", filepath.Base(file), page, r)
		}
	}
}

// callerFile returns the source file of the test that called the
// package's exported function.
func callerFile(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(2)
	if !ok {
		t.Fatal("docsample: no caller")
	}
	return file
}

func regions(t testing.TB, file, page string) []string {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	begin, end := "// "+page+" begins\n", "// "+page+" ends"
	var out []string
	rest := string(src)
	for {
		i := strings.Index(rest, begin)
		if i < 0 {
			return out
		}
		indent := rest[strings.LastIndex(rest[:i], "\n")+1 : i]
		rest = rest[i+len(begin):]
		j := strings.Index(rest, indent+end)
		if j < 0 {
			t.Fatalf("docsample: a region for %s in %s does not end", page, filepath.Base(file))
		}
		var lines []string
		for _, l := range strings.Split(strings.TrimRight(rest[:j], "\n"), "\n") {
			lines = append(lines, strings.TrimPrefix(l, indent))
		}
		out = append(out, strings.Join(lines, "\n"))
		rest = rest[j:]
	}
}

func goBlocks(t testing.TB, file, page string) []string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(moduleRoot(t, filepath.Dir(file)), "docs", page))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	rest := string(doc)
	for {
		i := strings.Index(rest, "```go\n")
		if i < 0 {
			return out
		}
		rest = rest[i+len("```go\n"):]
		j := strings.Index(rest, "```")
		if j < 0 {
			t.Fatalf("docsample: a go block of docs/%s does not end", page)
		}
		out = append(out, strings.TrimSuffix(rest[:j], "\n"))
		rest = rest[j+3:]
	}
}

// moduleRoot returns the nearest directory at or above dir holding go.mod.
func moduleRoot(t testing.TB, dir string) string {
	t.Helper()
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			t.Fatalf("docsample: no go.mod above %s", dir)
		}
	}
}
