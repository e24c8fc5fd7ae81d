package tide_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocsCiteExistingPaths: every repository path the docs name in
// backticks (`core/feed/pgfeed`, `cmd/tideload/capture.go`, ./core/...)
// and every relative link they make exists, so a reader who follows one
// finds it. The changelog is left out: it names paths that moved.
func TestDocsCiteExistingPaths(t *testing.T) {
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	docs = append(docs, "README.md")
	tops := []string{"core/", "client/", "cmd/", "middleware/", "adapters/", "authz/", "examples/", "docs/", "internal/", ".ci/"}
	code := regexp.MustCompile("`([^`\\s]+)`")
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	suffix := regexp.MustCompile(`(:\d+.*|/?\.\.\.)$`)
	for _, doc := range docs {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		fenced := false
		for i, line := range strings.Split(string(text), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				fenced = !fenced
				continue
			}
			if fenced {
				continue // code, not prose: its names are the program's
			}
			for _, m := range code.FindAllStringSubmatch(line, -1) {
				p := suffix.ReplaceAllString(strings.TrimPrefix(m[1], "./"), "")
				if !hasAnyPrefix(p, tops) || strings.ContainsAny(p, "*<>{}$|") {
					continue
				}
				if _, err := os.Stat(p); err != nil {
					t.Errorf("%s:%d names %s, which does not exist", doc, i+1, m[1])
				}
			}
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target, _, _ := strings.Cut(m[1], "#")
				if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				if _, err := os.Stat(filepath.Join(filepath.Dir(doc), target)); err != nil {
					t.Errorf("%s:%d links to %s, which does not exist", doc, i+1, m[1])
				}
			}
		}
	}
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
